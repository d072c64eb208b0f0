"""The safety rules of the tools that touch the outside world: which addresses and domains
web_fetch may reach (never Bruce's own web address), which file names artifact_save may write,
and how a page becomes text."""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from bruce_bot.config import WebFetchConfig, validate
from bruce_bot.tools.artifacts import CONTENT_TYPES, artifact_file, sanitise_filename
from bruce_bot.tools.own_address import OwnAddress
from bruce_bot.tools.web_fetch import (
    DomainPolicy,
    address_problem,
    decode,
    extract_readable,
    html_to_text,
    parse_address,
)

# ---- domains ---------------------------------------------------------------------------------


def host_of(url: str) -> str:
    """The host as the fetcher sees it: httpx's IDNA-encoded raw host."""
    return httpx.URL(url).raw_host.decode("ascii")


def policy(blocked: Sequence[str] = (), allowed: Sequence[str] = ()) -> DomainPolicy:
    config = WebFetchConfig(blocked_domains=list(blocked), allowed_domains=list(allowed))
    return DomainPolicy.from_config(config)


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/",
        "https://news.example.com/a",
        "http://deep.er.example.com/",
        "http://EXAMPLE.com/",
        "http://example.com./",  # trailing dot of a fully qualified name
        "http://Example.Com.:8080/x",
    ],
)
def test_a_blocked_domain_covers_itself_and_its_subdomains_in_any_spelling(url: str) -> None:
    problem = policy(blocked=["example.com"]).problem(host_of(url))

    assert problem is not None
    assert "tools.web_fetch.blocked_domains" in problem


@pytest.mark.parametrize("url", ["http://notexample.com/", "http://example.com.evil/"])
def test_a_blocked_domain_does_not_cover_look_alike_names(url: str) -> None:
    assert policy(blocked=["example.com"]).problem(host_of(url)) is None


@pytest.mark.parametrize("entry", ["bücher.example", "BÜCHER.example.", "xn--bcher-kva.example"])
@pytest.mark.parametrize("url", ["http://bücher.example/", "http://shop.xn--bcher-kva.example/"])
def test_an_idna_domain_matches_whether_written_in_unicode_or_punycode(
    entry: str, url: str
) -> None:
    assert policy(blocked=[entry]).problem(host_of(url)) is not None


def test_with_an_allow_list_only_those_domains_and_their_subdomains_are_fetched() -> None:
    rules = policy(allowed=["wikipedia.org", "news.example"])

    assert rules.problem(host_of("https://en.wikipedia.org/wiki/X")) is None
    assert rules.problem(host_of("https://NEWS.example./")) is None
    refusal = rules.problem(host_of("https://wikipedia.org.evil.example/"))
    assert refusal is not None and "tools.web_fetch.allowed_domains" in refusal
    assert rules.problem(host_of("http://93.184.216.34/")) is not None  # no address escapes it


def test_blocked_wins_over_allowed() -> None:
    rules = policy(blocked=["private.example.org"], allowed=["example.org"])

    assert rules.problem(host_of("https://www.example.org/")) is None
    refusal = rules.problem(host_of("https://a.private.example.org/"))
    assert refusal is not None and "blocked_domains" in refusal


def test_without_lists_every_domain_passes() -> None:
    assert DomainPolicy().problem("anything.example") is None


# ---- addresses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "a loopback address"),
        ("127.8.9.10", "a loopback address"),
        ("::1", "a loopback address"),
        ("10.1.2.3", "a private address"),
        ("172.16.0.1", "a private address"),
        ("192.168.1.1", "a private address"),
        ("fc00::1", "a private address"),
        ("169.254.1.1", "a link-local address"),
        ("fe80::1%eth0", "a link-local address"),
        ("100.64.0.1", "a shared (CGNAT) address"),
        ("100.127.255.254", "a shared (CGNAT) address"),
        ("224.0.0.1", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("0.0.0.0", "an unspecified address"),
        ("::", "an unspecified address"),
        ("240.0.0.1", "a private address"),  # reserved, and listed as private by Python
        ("::127.0.0.1", "a reserved address"),
        ("192.0.2.10", "a private address"),  # documentation range
        ("169.254.169.254", "a cloud metadata endpoint"),
        ("fd00:ec2::254", "a cloud metadata endpoint"),
        ("100.100.100.200", "a cloud metadata endpoint"),
        # IPv6 forms that carry an IPv4 address are judged by that address.
        ("::ffff:127.0.0.1", "a loopback address (as IPv6 ::ffff:7f00:1)"),
        ("::ffff:169.254.169.254", "a cloud metadata endpoint (as IPv6 ::ffff:a9fe:a9fe)"),
        ("2002:7f00:1::", "a loopback address (as IPv6 2002:7f00:1::)"),  # 6to4
        ("64:ff9b::a00:1", "a private address (as IPv6 64:ff9b::a00:1)"),  # NAT64
        ("::ffff:100.64.0.1", "a shared (CGNAT) address (as IPv6 ::ffff:6440:1)"),
        ("2002:c0a8:101::1", "a private address (as IPv6 2002:c0a8:101::1)"),  # 6to4 of 192.168
        # Teredo: a private client address, or (with a public one) 2001::/32 itself.
        (
            "2001:0:4136:e378:8000:63bf:f5ff:fffe",
            "a private address (as IPv6 2001:0:4136:e378:8000:63bf:f5ff:fffe)",
        ),
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "a private address"),  # client 8.8.8.8
        # Ranges Python 3.11 calls global that the IANA registries do not.
        ("fec0::1", "a site-local address"),
        ("feff:ffff::1", "a site-local address"),
        ("64:ff9b:1::a00:1", "a reserved address"),  # local-use NAT64 (RFC 8215)
        ("3fff::1", "a documentation address"),
        ("192.88.99.1", "a 6to4 relay anycast address"),
        ("198.18.0.1", "a private address"),  # benchmarking
        ("192.0.0.8", "an IETF protocol assignment address"),
        ("100::1", "a private address"),  # discard-only
        ("5f00::1", "a reserved address"),  # SRv6 SIDs, inside a reserved block
    ],
)
def test_addresses_that_are_not_on_the_public_internet_are_refused(
    address: str, problem: str
) -> None:
    assert address_problem(parse_address(address)) == problem


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "93.184.216.34", "2001:4860:4860::8888", "::ffff:8.8.8.8", "64:ff9b::808:808"],
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_problem(parse_address(address)) is None


@pytest.mark.parametrize("address", ["127.0.0.1", "10.0.0.1", "169.254.1.1", "100.64.0.1", "::1"])
def test_allowing_private_addresses_opens_the_local_network(address: str) -> None:
    assert address_problem(parse_address(address), allow_private=True) is None


@pytest.mark.parametrize(
    "address",
    ["169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254", "224.0.0.1", "0.0.0.0"],
)
def test_cloud_metadata_multicast_and_unspecified_stay_refused_even_when_private_is_allowed(
    address: str,
) -> None:
    assert address_problem(parse_address(address), allow_private=True) is not None


# ---- artifact file names -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("news.html", "news.html"),
        ("Report 2026 (final).HTML", "Report-2026-final.html"),
        ("../../x.html", "x.html"),
        ("/etc/passwd", "passwd.html"),
        ("a/b.html", "b.html"),
        ("a\\b\\c.md", "c.md"),
        ("..", "artifact.html"),
        (".", "artifact.html"),
        ("", "artifact.html"),
        (".htaccess", "htaccess.html"),
        ("...hidden.txt", "hidden.txt"),
        ("x..html", "x.html"),
        ("evil\x00.html", "evil.html"),
        ("evil.php\x00.html", "evil.php.html"),
        ("line\nbreak.csv", "linebreak.csv"),
        ("run.sh", "run.html"),
        ("archive.tar.gz", "archive.tar.html"),
        ("data.JSON", "data.json"),
        ("chart.svg", "chart.svg"),
        ("notes", "notes.html"),
        ("relatório café.md", "relatorio-cafe.md"),
        ("..／..／etc／passwd", "passwd.html"),  # fullwidth solidus
        ("\u202egnp.html", "gnp.html"),  # right-to-left override
        ("zero\u200bwidth.html", "zerowidth.html"),
        ("日本語.html", "artifact.html"),
        ("-dash-first.txt", "dash-first.txt"),
    ],
)
def test_file_names_are_reduced_to_a_safe_basename(raw: str, safe: str) -> None:
    assert sanitise_filename(raw) == safe


def test_long_file_names_are_cut_and_keep_their_extension() -> None:
    safe = sanitise_filename("a" * 500 + ".csv")

    assert len(safe) == 100
    assert safe.endswith("aaa.csv")


@pytest.mark.parametrize(
    "raw",
    ["../../x.html", "/etc/passwd", "a/b.html", "..", ".htaccess", "x\x00y", "..\\..\\boot.ini"],
)
def test_a_sanitised_name_is_a_single_harmless_path_part(raw: str) -> None:
    safe = sanitise_filename(raw)

    assert "/" not in safe and "\\" not in safe and "\x00" not in safe
    assert ".." not in safe and not safe.startswith(".")
    assert Path(safe).suffix in CONTENT_TYPES
    assert sanitise_filename(safe) == safe  # stable: the served name is the stored name


def test_artifact_file_only_accepts_canonical_uuids_and_sanitised_names(tmp_path: Path) -> None:
    good = str(uuid.uuid4())

    assert artifact_file(tmp_path, good, "news.html") == tmp_path / good / "news.html"
    assert artifact_file(tmp_path, good.upper(), "news.html") is None
    assert artifact_file(tmp_path, "not-a-uuid", "news.html") is None
    assert artifact_file(tmp_path, "..", "news.html") is None
    assert artifact_file(tmp_path, good, "../news.html") is None
    assert artifact_file(tmp_path, good, ".htaccess") is None


# ---- pages to text ----------------------------------------------------------------------------


def test_html_to_text_keeps_visible_text_by_block_and_skips_scripts() -> None:
    title, text = html_to_text(
        "<html><head><title> The  title </title><style>p{}</style></head><body>"
        "<h1>Heading</h1><p>First   paragraph.</p><script>alert(1)</script>"
        "<ul><li>one</li><li>two &amp; three</li></ul></body></html>"
    )

    assert title == "The title"
    assert text == "Heading\nFirst paragraph.\none\ntwo & three"


def test_when_trafilatura_fails_the_plain_html_pass_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Broken:
        @staticmethod
        def bare_extraction(*args: object, **kwargs: object) -> None:
            raise RuntimeError("lxml could not cope")

    monkeypatch.setitem(sys.modules, "trafilatura", Broken)

    title, text = extract_readable(
        "<title>T</title><p>Some text that is still here.</p>", "http://x.test/"
    )

    assert (title, text) == ("T", "Some text that is still here.")


def test_charset_comes_from_the_header_else_the_meta_tag_else_utf8() -> None:
    latin = "<meta charset='iso-8859-1'><p>São Paulo</p>".encode("iso-8859-1")

    assert "São Paulo" in decode(latin, None)
    assert "São Paulo" in decode("São Paulo".encode("cp1252"), "cp1252")
    assert decode("São".encode(), None) == "São"
    assert decode(b"abc", "no-such-charset") == "abc"


# ---- Bruce's own web address ---------------------------------------------------------------------


# A public address needs a strong dashboard token (config/loading.py refuses one without).
STRONG_TOKEN = "own-address-test-token-5f1c9a7e3b2d8046ac"


def own(**sections: Any) -> OwnAddress:
    web = {"auth_token": STRONG_TOKEN, **sections.pop("web", {})}
    return OwnAddress.from_config(validate({**sections, "web": web}))


def this_machines_address() -> str | None:
    """A non-loopback address of this machine (the one a route out would use), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # UDP: nothing is sent
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_the_dashboards_loopback_socket_is_refused_in_every_loopback_spelling() -> None:
    rules = own(web={"host": "127.0.0.1", "port": 8080})

    for address in ("127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1"):
        problem = rules.address_problem([address], 8080)
        assert problem is not None and "Bruce's own dashboard listens" in problem
    assert rules.address_problem(["127.0.0.1"], 3000) is None  # another local service
    assert rules.name_problem("localhost") is None  # judged by address and port, as above
    assert rules.address_problem(["93.184.216.34"], 8080) is None


def test_the_port_bound_at_start_is_refused_once_told() -> None:
    rules = own(web={"port": 0}, app={"public_url": "https://bruce.example.com"})
    assert rules.address_problem(["127.0.0.1"], 41234) is None
    rules.listening(41234)
    assert rules.address_problem(["127.0.0.1"], 41234) is not None


def test_the_public_url_and_allowed_hosts_names_are_refused_on_any_port() -> None:
    rules = own(
        app={"public_url": "https://Bruce.Example.com/"},
        web={"allowed_hosts": ["bruce.lan:8443", "http://assistant.home/", "10.0.0.5:9000"]},
    )

    for name in ("bruce.example.com", "BRUCE.example.com.", "bruce.lan", "assistant.home"):
        problem = rules.name_problem(name.lower())
        assert problem is not None and "Bruce's own web address" in problem
    assert rules.name_problem("example.com") is None
    assert rules.name_problem("www.bruce.example.com") is None
    assert rules.address_problem(["10.0.0.5"], 9000) is not None
    assert rules.address_problem(["10.0.0.5"], 80) is None


def test_bound_to_every_address_each_address_of_this_machine_is_refused_on_its_port() -> None:
    token = "lDuCtwUktuEDg5VYlefoZ_UGtU5m36jtRGdGLUf8Gbk"
    rules = own(web={"host": "0.0.0.0", "port": 8080, "auth_token": token})

    assert rules.address_problem(["127.0.0.1"], 8080) is not None
    assert rules.address_problem(["8.8.8.8"], 8080) is None  # not this machine
    mine = this_machines_address()
    if mine is not None:
        assert rules.address_problem([mine], 8080) is not None
        assert rules.address_problem([mine], 8081) is None
