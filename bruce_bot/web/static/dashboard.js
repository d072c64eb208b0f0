/* Shared helpers of the dashboard pages: calling the JSON API, building DOM nodes from data and
   showing times in the app's timezone. Data only ever becomes text nodes or attribute values set
   through the DOM — never HTML (no innerHTML anywhere). */
"use strict";

const Bruce = (() => {
  const zone = document.documentElement.dataset.timezone || "UTC";

  /* h("td", {className: "num"}, "42", otherNode): an element with properties and children;
     strings become text nodes, null/false children are skipped, "on<event>" adds a listener. */
  function h(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "className") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
  }

  function fill(node, ...children) {
    node.replaceChildren();
    append(node, children);
  }

  /* Calls the API; resolves to the JSON answer or throws an Error with the server's message.
     Writes are sent as JSON (the server refuses other content types). */
  async function api(path, { method = "GET", body } = {}) {
    const options = { method, credentials: "same-origin", headers: {} };
    if (method !== "GET") {
      options.headers["Content-Type"] = "application/json";
      if (body !== undefined) options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, options);
    } catch (e) {
      throw new Error("Could not reach Bruce; check that it is running and try again.");
    }
    if (response.status === 401) {
      location.href = "/login?next=" + encodeURIComponent(location.pathname + location.search);
      throw new Error("Signed out; redirecting to the login page…");
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
    return data;
  }

  let clock;
  try {
    clock = new Intl.DateTimeFormat("en-US", {
      timeZone: zone, hourCycle: "h23", year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit",
    });
  } catch (e) { // a zone this browser does not know: UTC, and the page says which zone it shows
    clock = new Intl.DateTimeFormat("en-US", {
      timeZone: "UTC", hourCycle: "h23", year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit",
    });
  }

  /* "2025-03-04 09:00" in the app's timezone; "—" for no time. */
  function time(iso) {
    if (!iso) return "—";
    const p = Object.fromEntries(clock.formatToParts(new Date(iso)).map((x) => [x.type, x.value]));
    return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}`;
  }

  function number(value) {
    return Number(value || 0).toLocaleString("en-US");
  }

  function bytes(size) {
    if (size < 1024) return `${size} B`;
    if (size < 1024 * 1024) return `${(size / 1024).toFixed(1)} kB`;
    return `${(size / 1024 / 1024).toFixed(1)} MB`;
  }

  function badge(status) {
    return h("span", { className: `badge ${status}` }, status);
  }

  /* A table: headers are labels or [label, className]; rows are <tr> nodes. */
  function table(headers, rows, footer) {
    const head = h("tr", {}, headers.map((x) => {
      const [label, className] = Array.isArray(x) ? x : [x, undefined];
      return h("th", { className, scope: "col" }, label);
    }));
    return h("div", { className: "table-wrap" },
      h("table", {}, h("thead", {}, head), h("tbody", {}, rows), footer ? h("tfoot", {}, footer) : null));
  }

  /* Text with http(s) URLs turned into links that open in a new tab. */
  function linkify(node, content) {
    for (const part of String(content).split(/(https?:\/\/[^\s<>"')\]]+)/g)) {
      if (/^https?:\/\//.test(part)) {
        node.append(h("a", { href: part, target: "_blank", rel: "noopener noreferrer" }, part));
      } else if (part) {
        node.append(part);
      }
    }
    return node;
  }

  /* A listing: how many `items` in #<count> (when given) and, in #<box>, render(items), or the
     `empty` sentence when there are none. */
  function listing(box, count, items, empty, render) {
    if (count) document.getElementById(count).textContent = `(${items.length})`;
    fill(document.getElementById(box), items.length ? render(items) : h("p", { className: "empty" }, empty));
  }

  function where(row) {
    return row.channel ? `${row.channel} · ${row.chat_id}` : "—";
  }

  function showError(error) {
    const box = document.getElementById("error");
    if (box) box.textContent = error ? error.message || String(error) : "";
  }

  /* "$1.23"; small amounts keep four decimals ("$0.0042"); "—" for no cost (no price). */
  function usd(value) {
    if (value === null || value === undefined) return "—";
    const digits = value !== 0 && Math.abs(value) < 0.01 ? 4 : 2;
    return "$" + Number(value).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  /* The monthly budget's warning (usage.monthly_budget) at the top of every page, from 80 %.
     Plain fetch, failures ignored: a page must never fail, or sign out, over its banner. */
  async function budgetBanner() {
    const main = document.querySelector("main");
    if (!main) return;
    let data;
    try {
      const response = await fetch("/api/usage/budget", { credentials: "same-origin" });
      if (!response.ok) return;
      data = await response.json();
    } catch (e) {
      return;
    }
    if (!data || data.level === "none" || data.monthly_budget === null) return;
    const spent = `${usd(data.spent_usd)} of ${usd(data.monthly_budget)} (${Math.round(data.percent)} %)`;
    const text = data.level === "exceeded"
      ? `Monthly LLM budget exceeded: an estimated ${spent} this month (${data.month}).`
      : `Monthly LLM budget at ${Math.round(data.percent)} %: an estimated ${spent} this month (${data.month}).`;
    // Before <main>, not in it: the chat page fills its <main> with the conversation.
    main.before(h("div", { id: "budget-banner", className: `budget-banner ${data.level}`, role: "status" },
      text, " ", h("a", { href: "/usage" }, "See usage")));
  }
  document.addEventListener("DOMContentLoaded", () => { budgetBanner(); });

  return { zone, h, fill, api, time, number, bytes, badge, table, linkify, listing, where, showError, usd };
})();
