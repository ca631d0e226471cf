// The Forewarn dashboard: a live view of the fleet, the events, the
// maintenance waves and the host maintenance sessions, pushed by the
// server as rendered HTML fragments over one text/event-stream, and forms
// that call the operator JSON API.
//
// The stream is read with fetch() rather than EventSource, which cannot
// send the Authorization header. The fragments are rendered and escaped
// by the server's html/template; this script only puts them in place.
"use strict";

(function () {
  const tokenKey = "forewarn.token";
  const $ = (id) => document.getElementById(id);
  const state = {
    q: "",          // the fleet filter
    vm: "",         // the VM shown in detail
    ctrl: null,     // the AbortController of the stream in flight
    backoff: 0,     // the wait before the next reconnection, in ms
    timer: 0,       // the pending reconnection
  };

  function token() {
    return sessionStorage.getItem(tokenKey) || "";
  }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    const t = token();
    if (t) {
      h["Authorization"] = "Bearer " + t;
    }
    return h;
  }

  // message returns the message of the API's {"error":{"code","message"}}.
  function message(body) {
    return body && body.error && typeof body.error.message === "string" ? body.error.message : "";
  }

  async function readJSON(resp) {
    try {
      return await resp.json();
    } catch (e) {
      return null;
    }
  }

  function show(id, text) {
    $(id).textContent = text || "";
  }

  function setLive(s, text) {
    const el = $("live");
    el.dataset.state = s;
    el.textContent = text;
  }

  // askToken stops the stream and shows the token form.
  function askToken(why) {
    stop();
    sessionStorage.removeItem(tokenKey);
    $("main").hidden = true;
    $("forget").hidden = true;
    $("token-form").hidden = false;
    show("token-error", why);
    setLive("idle", "token needed");
    $("token").focus();
  }

  // api calls the operator API and returns its JSON answer; it throws an
  // Error carrying the server's message when the answer is not a success.
  async function api(method, path, body) {
    const init = { method: method, headers: headers(), cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    const data = await readJSON(resp);
    if (resp.status === 401) {
      askToken(message(data));
    }
    if (!resp.ok) {
      const err = new Error(message(data) || resp.status + " " + resp.statusText);
      err.code = data && data.error ? data.error.code : "";
      throw err;
    }
    return data;
  }

  function stop() {
    clearTimeout(state.timer);
    if (state.ctrl) {
      state.ctrl.abort();
      state.ctrl = null;
    }
  }

  // connect opens the stream for the current filter and VM, replacing
  // the one in flight. The server sends a snapshot of every fragment
  // first, then each fragment again when it changes.
  async function connect() {
    stop();
    const ctrl = new AbortController();
    state.ctrl = ctrl;
    const params = new URLSearchParams();
    if (state.q) {
      params.set("q", state.q);
    }
    if (state.vm) {
      params.set("vm", state.vm);
    }
    setLive("connecting", "connecting…");
    let resp;
    try {
      resp = await fetch("/ui/stream?" + params.toString(), {
        headers: headers({ "Accept": "text/event-stream" }),
        signal: ctrl.signal,
        cache: "no-store",
      });
    } catch (e) {
      return retry(ctrl);
    }
    if (resp.status === 401) {
      askToken(message(await readJSON(resp)));
      return;
    }
    if (!resp.ok) {
      const why = message(await readJSON(resp)) || resp.status + " " + resp.statusText;
      if (resp.status === 400) {
        show("fleet-error", why);
        setLive("idle", "not connected");
        return;
      }
      setLive("down", why);
      return retry(ctrl, resp.status === 503 ? 5000 : 0);
    }
    show("fleet-error", "");
    setLive("live", "live");
    state.backoff = 0;
    try {
      await read(resp.body.getReader(), ctrl);
    } catch (e) {
      // The stream broke or was aborted; retry decides.
    }
    retry(ctrl);
  }

  // retry reconnects after a growing wait, unless ctrl was replaced or
  // aborted.
  function retry(ctrl, atLeast) {
    if (ctrl.signal.aborted || state.ctrl !== ctrl) {
      return;
    }
    state.backoff = Math.min(Math.max(state.backoff * 2, 500, atLeast || 0), 10000);
    if ($("live").dataset.state === "live") {
      setLive("down", "reconnecting…");
    }
    state.timer = setTimeout(connect, state.backoff);
  }

  // read parses the event stream: "event:" and "data:" lines, an empty
  // line ending each event, and ":" comments (the heartbeat) ignored.
  async function read(reader, ctrl) {
    const decoder = new TextDecoder();
    let buf = "";
    let name = "message";
    let data = [];
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done || ctrl.signal.aborted) {
        return;
      }
      buf += decoder.decode(chunk.value, { stream: true });
      let start = 0;
      let nl;
      while ((nl = buf.indexOf("\n", start)) >= 0) {
        let line = buf.slice(start, nl);
        start = nl + 1;
        if (line.endsWith("\r")) {
          line = line.slice(0, -1);
        }
        if (line === "") {
          if (data.length > 0) {
            dispatch(name, data.join("\n"));
          }
          name = "message";
          data = [];
          continue;
        }
        if (line[0] === ":") {
          continue;
        }
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value[0] === " ") {
          value = value.slice(1);
        }
        if (field === "event") {
          name = value;
        } else if (field === "data") {
          data.push(value);
        }
      }
      buf = buf.slice(start);
    }
  }

  // dispatch puts a pushed fragment in place. Its HTML comes from the
  // server's templates, which escaped every name in it.
  function dispatch(name, html) {
    switch (name) {
      case "fleet":
      case "events":
      case "waves":
      case "sessions":
        $(name).innerHTML = html;
        break;
      case "vm":
        if (state.vm) {
          $("vm").innerHTML = html;
        }
        break;
    }
  }

  // showVM selects the VM shown in detail; the stream reconnects with it
  // and pushes its fragment.
  function showVM(name) {
    state.vm = name;
    $("vm-name").value = name;
    show("vm-error", "");
    show("vm-ok", "");
    connect();
  }

  async function eventAction(action, id) {
    show("events-error", "");
    try {
      await api("POST", "/v1/events/" + encodeURIComponent(id) + "/" + action);
    } catch (e) {
      show("events-error", e.message);
    }
  }

  async function vmAction(action, name) {
    show("vm-error", "");
    show("vm-ok", "");
    if (!name) {
      show("vm-error", "name a VM");
      return;
    }
    const body = {};
    const notice = $("vm-notice").value.trim();
    const lasts = $("vm-lasts").value.trim();
    if (notice && action === "evict") {
      body.notice = notice;
    }
    if (lasts) {
      body.lasts = lasts;
    }
    try {
      const ev = await api("POST", "/v1/vms/" + encodeURIComponent(name) + "/" + action, body);
      show("vm-ok", action + " " + name + ": event " + ev.id);
    } catch (e) {
      show("vm-error", e.message);
    }
  }

  // createBody builds POST /v1/events' body as forewarn event create
  // does; the server checks every field.
  function createBody(form) {
    const body = {
      type: form.elements.type.value,
      vms: form.elements.vms.value.split(/[\s,]+/).filter(Boolean),
    };
    const text = (name) => form.elements[name].value.trim();
    if (text("notice")) {
      body.notice = text("notice");
    }
    if (text("lasts")) {
      body.lasts = text("lasts");
    }
    const duration = text("duration");
    if (duration) {
      // A whole number is sent as one; anything else as typed, for the
      // server to refuse with its own message.
      body.durationInSeconds = /^-?[0-9]+$/.test(duration) ? Number(duration) : duration;
    }
    if (form.elements.source.value) {
      body.source = form.elements.source.value;
    }
    if (form.elements.description.value) {
      body.description = form.elements.description.value;
    }
    if (form.elements.started.checked) {
      body.started = true;
    }
    return body;
  }

  function start() {
    $("token-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const t = $("token").value.trim();
      if (!t) {
        return;
      }
      sessionStorage.setItem(tokenKey, t);
      $("token").value = "";
      $("token-form").hidden = true;
      $("main").hidden = false;
      $("forget").hidden = false;
      show("token-error", "");
      connect();
    });
    $("forget").addEventListener("click", () => askToken(""));

    let filterTimer = 0;
    $("filter").addEventListener("input", () => {
      clearTimeout(filterTimer);
      filterTimer = setTimeout(() => {
        state.q = $("filter").value;
        connect();
      }, 300);
    });
    $("filter-form").addEventListener("submit", (e) => {
      e.preventDefault();
      clearTimeout(filterTimer);
      state.q = $("filter").value;
      connect();
    });

    $("create-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      show("create-error", "");
      show("create-ok", "");
      try {
        const ev = await api("POST", "/v1/events", createBody(e.target));
        show("create-ok", "created " + ev.id);
      } catch (err) {
        show("create-error", err.message);
      }
    });

    $("vm-form").addEventListener("submit", (e) => {
      e.preventDefault();
      showVM($("vm-name").value.trim());
    });

    document.addEventListener("click", (e) => {
      const b = e.target.closest("button");
      if (!b) {
        return;
      }
      if (b.dataset.action && b.dataset.id) {
        eventAction(b.dataset.action, b.dataset.id);
      } else if (b.dataset.vmAction) {
        vmAction(b.dataset.vmAction, b.dataset.vm || $("vm-name").value.trim());
      } else if (b.dataset.show) {
        showVM(b.dataset.show);
      }
    });

    if (document.body.dataset.tokenRequired === "true" && !token()) {
      askToken("");
      return;
    }
    $("forget").hidden = !token();
    connect();
  }

  start();
})();
