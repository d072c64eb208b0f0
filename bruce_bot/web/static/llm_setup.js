/* The LLM settings form, shared by the Settings page and the chat page's first-run setup card:
   provider (Anthropic, OpenAI, or a local OpenAI-compatible server with its usual address
   prefilled), base URL, API key (write-only: the field is always empty, the saved key is shown
   masked), model (listed from the server's /v1/models), Test and Save. A save is tried by Bruce
   first and refused with the provider's words; nothing is stored then. Text from the server is
   only ever set as text (never HTML). Needs dashboard.js (Bruce.h, Bruce.api). */
"use strict";

const BruceLLM = (() => {
  // dashboard.js loads after the pages' own scripts: its helpers are looked up when used.
  const h = (...args) => Bruce.h(...args);
  const api = (...args) => Bruce.api(...args);

  // A local server speaks OpenAI's API; its usual address on this computer.
  const LOCAL_SERVERS = [
    { name: "Ollama", url: "http://127.0.0.1:11434/v1" },
    { name: "vLLM", url: "http://127.0.0.1:8000/v1" },
    { name: "LM Studio", url: "http://127.0.0.1:1234/v1" },
  ];
  const CHOICES = [
    { value: "anthropic", label: "Anthropic (Claude)" },
    { value: "openai", label: "OpenAI" },
    { value: "local", label: "A local server (Ollama, vLLM, LM Studio)" },
  ];
  const SOURCES = { config: "from config.yml", dashboard: "set in the dashboard", default: "default" };

  let counter = 0;

  function field(label, input, hint) {
    return h("div", { className: "llm-field" },
      h("label", { for: input.id }, label), input, hint || null);
  }

  /* Fills `node` with the form; `full`: also the background model, where each value comes from
     and "Reset to config" (the Settings page); `onSaved(answer)` after a save. */
  async function form(node, { full = false, onSaved = () => {} } = {}) {
    const id = (name) => `llm-${name}-${++counter}`;
    let current = await api("/api/llm");
    const values = () => Object.fromEntries(current.fields.map((f) => [f.name, f]));

    const choice = h("select", { id: id("provider"), name: "provider" },
      CHOICES.map((c) => h("option", { value: c.value }, c.label)));
    const local = h("select", { id: id("local"), name: "local" },
      LOCAL_SERVERS.map((s) => h("option", { value: s.url }, `${s.name} — ${s.url}`)));
    const baseUrl = h("input", { id: id("base-url"), name: "base_url", type: "url", placeholder: "the provider's default", autocomplete: "off" });
    const key = h("input", { id: id("api-key"), name: "api_key", type: "password", autocomplete: "off" });
    const models = h("datalist", { id: id("models") });
    const model = h("input", { id: id("model"), name: "model", list: models.id, autocomplete: "off", required: true });
    const background = h("input", { id: id("background"), name: "background_model", autocomplete: "off", placeholder: "the same as the model" });
    const list = h("button", { type: "button", className: "secondary" }, "List models");
    const test = h("button", { type: "button", className: "secondary" }, "Test connection");
    const save = h("button", { type: "submit" }, "Save");
    const reset = h("button", { type: "button", className: "secondary" }, "Reset to config");
    const status = h("p", { className: "status-line", role: "status" });
    const sources = h("ul", { className: "hint llm-sources" });

    const localRow = field("Server", local);
    const keyHint = h("span", { className: "hint" });

    function show() {
      const v = values();
      const provider = v.provider.value;
      const url = v.base_url.value || "";
      const isLocal = provider === "openai" && url && !url.startsWith("https://api.openai.com");
      choice.value = isLocal ? "local" : provider;
      if (isLocal && LOCAL_SERVERS.some((s) => s.url === url)) local.value = url;
      baseUrl.value = url;
      model.value = v.model.value || "";
      background.value = v.background_model.value || "";
      key.value = "";
      keyHint.textContent = v.api_key.value
        ? ` Saved: ${v.api_key.value} (leave empty to keep it).`
        : " None saved.";
      key.placeholder = v.api_key.value ? `${v.api_key.value} (unchanged)` : "paste the key";
      reset.disabled = !current.fields.some((f) => f.source === "dashboard");
      sources.replaceChildren(...current.fields.map((f) =>
        h("li", { dataset: { field: f.name } }, h("code", {}, `llm.${f.name}`), `: ${SOURCES[f.source]}`)));
      pick();
    }

    function pick() {
      localRow.hidden = choice.value !== "local";
    }

    choice.addEventListener("change", () => {
      pick();
      if (choice.value === "local") baseUrl.value = local.value;
      else baseUrl.value = "";
      models.replaceChildren();
    });
    local.addEventListener("change", () => { baseUrl.value = local.value; models.replaceChildren(); });

    function body() {
      const change = {
        provider: choice.value === "local" ? "openai" : choice.value,
        base_url: baseUrl.value.trim(),
        model: model.value.trim(),
      };
      if (key.value) change.api_key = key.value;
      if (full) change.background_model = background.value.trim();
      return change;
    }

    async function busy(button, work) {
      button.disabled = true;
      try { await work(); } catch (e) { status.textContent = e.message; status.className = "status-line bad"; }
      finally { button.disabled = button === reset && !current.fields.some((f) => f.source === "dashboard"); }
    }

    function say(text, ok = true) {
      status.textContent = text;
      status.className = ok ? "status-line" : "status-line bad";
    }

    list.addEventListener("click", () => busy(list, async () => {
      const { provider, base_url, api_key } = body();
      const data = await api("/api/llm/models", { method: "POST", body: { provider, base_url, api_key } });
      models.replaceChildren(...data.models.map((m) => h("option", { value: m })));
      // A model this server does not list (the previous provider's) cannot be kept.
      if (data.models.length && !data.models.includes(model.value)) model.value = data.models[0];
      say(data.models.length ? `${data.models.length} models: ${data.models.join(", ")}` : "The server lists no models.");
    }));
    test.addEventListener("click", () => busy(test, async () => {
      say("Testing…");
      const result = await api("/api/llm/test", { method: "POST", body: body() });
      say(result.ok ? `✓ ${result.detail}` : `✗ ${result.detail}`, result.ok);
    }));
    reset.addEventListener("click", () => busy(reset, async () => {
      if (!confirm("Go back to the LLM settings of config.yml?")) return;
      current = await api("/api/llm", { method: "DELETE" });
      show();
      say("Back to config.yml's settings.");
    }));

    const root = h("form", { className: "llm-setup", dataset: { form: "llm" } },
      field("Provider", choice),
      localRow,
      field("Base URL", baseUrl),
      field("API key", key, keyHint),
      h("div", { className: "llm-field" }, h("label", { for: model.id }, "Model"), h("div", { className: "toolbar" }, model, list), models),
      full ? field("Background model", background, h("span", { className: "hint" }, " For summaries and the brain.")) : null,
      h("div", { className: "toolbar" }, test, save, full ? reset : null),
      status,
      full ? sources : null,
    );
    root.addEventListener("submit", (event) => {
      event.preventDefault();
      busy(save, async () => {
        say("Testing and saving…");
        current = await api("/api/llm", { method: "PUT", body: body() });
        show();
        say(`✓ Saved: ${current.provider} / ${current.model}. The next message is answered by it.`);
        onSaved(current);
      });
    });
    show();
    node.replaceChildren(root);
    return current;
  }

  /* The platforms come from the server's registry (GET /api/platforms), so a platform added
     there gets its login form and allowlist section here without a change to this file: the
     form is drawn from the fields of its login (one bot token, or Matrix's homeserver, user id,
     password and access token). */
  let platformsAsked = null;
  function platforms() {
    platformsAsked = platformsAsked || api("/api/platforms").then((answer) => answer.platforms.map((p) => ({
      name: p.name,
      label: p.title,
      hint: p.token_help.charAt(0).toUpperCase() + p.token_help.slice(1) + ".",
      fields: p.fields,
      single: p.single_token,
    })));
    return platformsAsked;
  }

  function linkTo(href) {
    return href ? h("a", { href, target: "_blank", rel: "noopener noreferrer" }, href) : "";
  }

  /* One input per login field: a secret one is a password box that is always empty (the saved
     value is never sent to the browser; empty keeps it), the others show the value in use. */
  function loginInputs(platform) {
    return platform.fields.map((f) => {
      const input = h("input", {
        id: `channel-${platform.name}-${f.key}-${++counter}`,
        name: f.key,
        type: f.secret ? "password" : "text",
        autocomplete: "off",
        spellcheck: "false",
        placeholder: f.placeholder || (platform.single ? "empty: the one in use" : ""),
        dataset: { loginField: f.key },
      });
      const hint = h("span", { className: "hint" }, platform.single ? platform.hint : (f.help ? ` ${f.help}.` : ""));
      const label = `${platform.label} ${f.label.charAt(0).toLowerCase()}${f.label.slice(1)}`;
      return { field: f, input, hint, row: field(f.optional ? `${label} (optional)` : label, input, hint) };
    });
  }

  /* What the inputs say: the fields typed in (an empty secret is left out: it stays as it is). */
  function typed(inputs) {
    const fields = {};
    for (const { field: f, input } of inputs) {
      const value = input.value.trim();
      if (value || !f.secret) fields[f.key] = value;
    }
    return fields;
  }

  /* A login form per platform and "Test connection": Telegram getMe, Discord's login, Matrix's
     login on the homeserver; a working login shows the bot's link (t.me/<bot>, or the invite
     that adds it to a server). With the platform on in config.yml, the login can be saved too
     (loginSaving); with `allowlists` (the Settings page), who may talk is edited under it. */
  async function channels(node, { allowlists = false } = {}) {
    let known;
    try {
      known = await platforms();
    } catch (e) {
      node.textContent = e.message;
      return;
    }
    node.replaceChildren(...known.flatMap((platform) => {
      const inputs = loginInputs(platform);
      const test = h("button", { type: "button", className: "secondary" }, "Test connection");
      const result = h("p", { className: "status-line", role: "status" });
      test.addEventListener("click", async () => {
        test.disabled = true;
        result.textContent = "Testing…";
        result.className = "status-line";
        try {
          const fields = typed(inputs);
          const body = platform.single ? { token: fields.token || null } : { fields };
          const answer = await api(`/api/channels/${platform.name}/test`, { method: "POST", body });
          result.replaceChildren(answer.ok ? `✓ ${answer.detail} ` : `✗ ${answer.detail}${answer.fix ? ` — ${answer.fix}` : ""}`, linkTo(answer.link));
          if (!answer.ok) result.className = "status-line bad";
        } catch (e) {
          result.textContent = e.message;
          result.className = "status-line bad";
        } finally {
          test.disabled = false;
        }
      });
      const tools = h("div", { className: "toolbar" }, test);
      const saved = h("p", { className: "hint" });
      loginSaving(platform, inputs, tools, saved, result).catch((e) => { result.textContent = e.message; });
      const setup = h("div", { className: "llm-setup", dataset: { channel: platform.name } },
        platform.single ? null : h("p", { className: "hint" }, platform.hint),
        inputs.map((x) => x.row),
        saved,
        tools,
        result);
      if (!allowlists) return [setup];
      const people = h("div", { className: "allowlist", dataset: { allowlist: platform.name } });
      allowlist(platform, people).catch((e) => { people.textContent = e.message; });
      return [setup, people];
    }));
  }

  /* "In use: …": the token, masked; or each field of a longer login (secrets masked). */
  function inUse(platform, state) {
    if (platform.single) {
      const token = state.fields.length ? state.fields[0].value : "";
      return token ? `In use: ${token}` : "";
    }
    const set = state.fields.filter((f) => f.set);
    const labels = Object.fromEntries(platform.fields.map((f) => [f.key, f.label.toLowerCase()]));
    return set.length ? `In use: ${set.map((f) => `${labels[f.key]} ${f.value}`).join(", ")}` : "";
  }

  /* With the platform on in config.yml, its login can be changed here: tried (getMe, Discord's
     login, Matrix's), stored, and the channel reconnected with it (no restart). */
  async function loginSaving(platform, inputs, tools, saved, result) {
    const path = `/api/channels/${platform.name}/login`;
    let state = await api(path);
    if (!state.enabled) {
      saved.textContent = `${platform.label} is off in config.yml (channels.${platform.name}.enabled: true, and a restart once, lets you save its ${platform.single ? "token" : "login"} here).`;
      return;
    }
    const save = h("button", { type: "button" }, "Save and reconnect");
    const reset = h("button", { type: "button", className: "secondary" }, "Reset to config");
    const show = () => {
      const values = Object.fromEntries(state.fields.map((f) => [f.key, f]));
      for (const { field: f, input } of inputs) {
        const current = values[f.key];
        if (f.secret) {
          input.value = "";
          if (!platform.single) input.placeholder = current && current.set ? `${current.value} (unchanged)` : f.placeholder || "";
        } else {
          input.value = current ? current.value : "";
        }
      }
      const where = state.source === "dashboard" ? "set in the dashboard" : "from config.yml";
      const used = inUse(platform, state);
      saved.textContent = used
        ? `${used} (${where}).`
        : `No ${platform.single ? "token" : "login"} yet: ${platform.label} starts once you save one.`;
      reset.disabled = state.source !== "dashboard";
    };
    async function write(button, method, body) {
      button.disabled = true;
      result.className = "status-line";
      result.textContent = method === "PUT" ? "Testing and reconnecting…" : "Reconnecting…";
      try {
        state = await api(path, { method, body });
        result.replaceChildren(state.bot ? `✓ Reconnected as ${state.bot} ` : `✓ Back to config.yml's ${platform.single ? "token" : "login"}.`, linkTo(state.link));
        show();
      } catch (e) {
        result.textContent = e.message;
        result.className = "status-line bad";
      } finally {
        button.disabled = button === reset && state.source !== "dashboard";
      }
    }
    save.addEventListener("click", () => {
      const fields = typed(inputs);
      if (platform.single && !fields.token) { result.textContent = "Paste the new token first."; result.className = "status-line bad"; return; }
      write(save, "PUT", { fields });
    });
    reset.addEventListener("click", () => write(reset, "DELETE"));
    tools.append(save, reset);
    show();
  }

  /* Who may talk on the platform: the ids in use (from config.yml, or saved here, which wins),
     each with Remove, a field to add one, and Reset to config. Every change stores the whole
     list and counts from the next message. Ids stay text: Discord's are beyond a JS number. */
  async function allowlist(platform, node) {
    let state = await api(`/api/channels/${platform.name}/allowlist`);
    const input = h("input", { id: `allow-${platform.name}-${++counter}`, type: "text", inputMode: "numeric", autocomplete: "off", placeholder: "a user id, e.g. 123456789" });
    const add = h("button", { type: "submit", className: "secondary" }, "Add");
    const reset = h("button", { type: "button", className: "secondary" }, "Reset to config");
    const list = h("ul", { className: "allowlist-ids" });
    const source = h("p", { className: "hint source" });
    const status = h("p", { className: "status-line", role: "status" });
    function show(message) {
      source.textContent = state.source === "dashboard"
        ? `Saved in the dashboard; it overrides config.yml (${state.config_user_ids.join(", ") || "nobody"}).`
        : "From config.yml (channels." + platform.name + ".allowed_user_ids).";
      reset.disabled = state.source !== "dashboard";
      list.replaceChildren(...(state.allowed_user_ids.length ? state.allowed_user_ids.map((id) => {
        const remove = h("button", { type: "button", className: "danger" }, "Remove");
        remove.addEventListener("click", () => write("PUT", state.allowed_user_ids.filter((other) => other !== id), `Removed ${id}: refused from their next message.`));
        return h("li", { dataset: { userId: id } }, h("code", {}, id), " ", remove);
      }) : [h("li", { className: "empty" }, "Nobody (people approved by pairing still are).")]));
      if (message !== undefined) status.textContent = message;
    }
    async function write(method, ids, message) {
      status.className = "status-line";
      try {
        state = await api(`/api/channels/${platform.name}/allowlist`, { method, body: method === "PUT" ? { allowed_user_ids: ids } : undefined });
        input.value = "";
        show(message);
      } catch (e) {
        status.textContent = e.message;
        status.className = "status-line bad";
      }
    }
    const form = h("form", { className: "toolbar" }, input, add, reset);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const id = input.value.trim();
      if (!id) { status.textContent = "Type a user id first."; status.className = "status-line bad"; return; }
      write("PUT", [...state.allowed_user_ids, id], `Added ${id}: answered from their next message.`);
    });
    reset.addEventListener("click", () => write("DELETE", null, "Back to config.yml's list."));
    node.replaceChildren(
      h("h3", {}, h("label", { for: input.id }, `Who may talk on ${platform.label}`), " ", h("code", { className: "count" }, `channels.${platform.name}.allowed_user_ids`)),
      source, list, form, status);
    show();
  }

  return { form, channels, LOCAL_SERVERS };
})();
