"""`bruce token`: a new random token for `web.auth_token`; `bruce token --show` prints the one
the dashboard takes now (config.yml's, else the one Bruce made in the data dir on its first
start), for scripts' `Authorization: Bearer` header."""

from __future__ import annotations

import argparse
import secrets
import sys

from bruce_bot.config import load_config
from bruce_bot.web.login_token import read_token, token_path

TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 characters, 256 bits


def run(args: argparse.Namespace) -> int:
    if not args.show:
        print(secrets.token_urlsafe(TOKEN_BYTES))
        return 0
    return _show(args.config)


def _show(path: str | None) -> int:
    config = load_config(path)
    web = config.web
    if web.login_disabled:
        print("bruce: web.auth_token is 'none': the dashboard takes no token", file=sys.stderr)
        return 1
    if web.auth_token:
        print(web.auth_token)
        return 0
    data_dir = config.app.data_dir
    token = read_token(data_dir)
    if token is None:
        print(
            f"bruce: no dashboard token yet in {token_path(data_dir)}: `bruce run` makes it on "
            "its first start (or set web.auth_token in config.yml)",
            file=sys.stderr,
        )
        return 1
    print(token)
    return 0
