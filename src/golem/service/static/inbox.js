// golem inbox: progressive enhancement only. Every action works without this file
// (plain forms and links); with it the pages update live over server-sent events,
// relative times tick, and single-key shortcuts move between pending calls.
(() => {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

  // Sign in from a link like /login#token=... (golem demo prints one). The fragment
  // never reaches the server or its logs; it is removed from the address bar at once.
  // Nothing is submitted until the user has seen whose identity the link signs in as and
  // clicked: a link from someone else must not sign anyone in as them (login CSRF).
  async function loginFromFragment() {
    const form = $("#login-form");
    const match = location.hash.match(/^#token=([^&]+)/);
    if (!form || !match) return;
    history.replaceState(null, "", location.pathname + location.search);
    let token;
    try { token = decodeURIComponent(match[1]); } catch (err) { return; }
    const box = $("#link-confirm"), who = $("#link-who"), button = $("#sign-in");
    box.hidden = false;
    $("#token-field").hidden = true;
    $("#token-hint").hidden = true;
    $("#link-cancel").hidden = false;
    button.disabled = true;
    let identity = null;
    try {
      const res = await fetch("/api/whoami", { headers: { Authorization: "Bearer " + token } });
      if (res.ok) identity = (await res.json()).identity;
    } catch (err) { /* shown below */ }
    if (identity === null) {
      who.textContent = "This sign-in link is not valid.";
      $("#token-field").hidden = false;
      return;
    }
    $("#token", form).value = token;
    who.textContent = "This link signs you in as ";
    const strong = document.createElement("strong");
    strong.textContent = identity;
    who.append(strong, ".");
    button.textContent = "Sign in as " + identity;
    button.disabled = false;
    button.focus();
  }

  // ------------------------------------------------------------------ relative times
  function span(seconds) {
    const s = Math.abs(seconds);
    if (s < 45) return "a few seconds";
    const minutes = Math.round(s / 60);
    if (minutes < 60) return minutes + " min";
    const hours = Math.round(s / 3600);
    if (hours < 24) return hours + " h";
    return Math.round(s / 86400) + " d";
  }
  function tick() {
    const now = Date.now();
    for (const t of $$("time[data-ago]")) {
      const s = (now - Date.parse(t.dateTime)) / 1000;
      t.textContent = s < 45 ? "just now" : span(s) + " ago";
    }
    for (const t of $$("time[data-until]")) {
      const s = (Date.parse(t.dateTime) - now) / 1000;
      t.textContent = s <= 0 ? "now (expired)" : "in " + span(s);
      t.classList.toggle("soon", s < 300);
    }
  }

  // ------------------------------------------------------------------ live updates
  // Each [data-live] region holds children with an id and a data-v version. A refresh
  // fetches the same page, keeps every child whose version did not change (so text
  // typed into a form survives), inserts new ones and removes the rest.
  function patchRegion(region, fresh) {
    const old = new Map();
    for (const el of Array.from(region.children)) if (el.id) old.set(el.id, el);
    const arrived = [];
    const wanted = Array.from(fresh.children).map((n) => {
      const kept = old.get(n.id);
      if (kept && kept.dataset.v === n.dataset.v) return kept;
      if (kept && kept.hasAttribute("data-nest")) {  // patch inside, keeping typed text
        patchRegion(kept, n);
        kept.dataset.v = n.dataset.v;
        return kept;
      }
      const node = document.importNode(n, true);
      if (!kept && n.matches(".run-group, [data-call]")) arrived.push(node);
      return node;
    });
    if (region.hasAttribute("data-new-on-top") && arrived.length) {
      // New work goes to the top (under the heading), highlighted, until the next reload.
      const rest = wanted.filter((n) => !arrived.includes(n));
      const head = rest.length && rest[0].matches("h2") ? [rest.shift()] : [];
      wanted.splice(0, wanted.length, ...head, ...arrived, ...rest);
    }
    for (const node of arrived) node.classList.add("is-new");
    const keep = new Set(wanted);
    for (const el of Array.from(region.children)) if (!keep.has(el)) el.remove();
    wanted.forEach((node, i) => {
      const at = region.children[i];
      if (at !== node) region.insertBefore(node, at || null);
    });
  }

  function patch(doc) {
    const active = document.activeElement;
    const activeCard = active && active.closest ? active.closest("[data-call]") : null;
    const siblings = $$("[data-call]");
    const index = activeCard ? siblings.indexOf(activeCard) : -1;
    for (const region of $$("[data-live]")) {
      const fresh = region.id && doc.getElementById(region.id);
      if (fresh) patchRegion(region, fresh);
    }
    if (doc.title) document.title = doc.title;
    for (const id of ["pending-count"]) {
      const mine = document.getElementById(id), theirs = doc.getElementById(id);
      if (mine && theirs) {
        mine.textContent = theirs.textContent;
        mine.toggleAttribute("data-zero", theirs.hasAttribute("data-zero"));
      }
    }
    if (active && active !== document.body && !document.contains(active)) {
      const cards = $$("[data-call]");
      const next = cards[Math.min(Math.max(index, 0), cards.length - 1)];
      (next || $("#main")).focus();
    }
    tick();
  }

  let refreshing = null, again = false;
  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = (async () => {
      const res = await fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (!res.ok || new URL(res.url).pathname !== location.pathname) return;
      patch(new DOMParser().parseFromString(await res.text(), "text/html"));
    })();
    try { await refreshing; } catch (err) { /* the next event retries */ }
    refreshing = null;
    if (again) { again = false; refresh(); }
  }

  function announce(text) {
    const box = $("#live-status");
    if (box) box.textContent = text;
  }

  // ------------------------------------------------------------------ edit-and-approve diff
  // Shows, as the approver types, which lines of the arguments change (a line LCS diff).
  function lineDiff(a, b) {
    const n = a.length, m = b.length;
    const lcs = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
    for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    const out = [];
    let i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[i] === b[j]) { out.push(["same", "  " + a[i]]); i++; j++; }
      else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) { out.push(["add", "+ " + b[j]]); j++; }
      else { out.push(["del", "- " + a[i]]); i++; }
    }
    return out;
  }
  function showDiff(area) {
    const box = area.form && $("[data-diff]", area.form);
    if (!box) return;
    const before = area.dataset.original.split("\n"), after = area.value.split("\n");
    box.textContent = "";
    if (area.value === area.dataset.original) return;
    if (before.length * after.length > 250000) { box.textContent = "(too long to compare here)"; return; }
    const pre = document.createElement("pre");
    pre.setAttribute("aria-label", "Your changes");
    for (const [kind, line] of lineDiff(before, after)) {
      const span = document.createElement("span");
      span.className = "d-" + kind;
      span.textContent = line + "\n";
      pre.append(span);
    }
    box.append(pre);
  }

  // ------------------------------------------------------------------ browser notifications
  // Opt-in: the button asks for permission; while on, a run that starts waiting shows a
  // notification when this tab is in the background.
  const NOTIFY_KEY = "golem-notify";
  function notifyOn() {
    return window.Notification && Notification.permission === "granted" && localStorage.getItem(NOTIFY_KEY) === "on";
  }
  function setupBrowserNotify() {
    const button = $("#browser-notify");
    if (!button || !window.Notification) return;
    const state = $("#browser-notify-state");
    const show = () => {
      button.textContent = notifyOn() ? "Stop browser notifications" : "Notify me in this browser";
      if (state) state.textContent = notifyOn() ? "On while this tab is open." : (Notification.permission === "denied" ? "Blocked in this browser's settings." : "");
    };
    button.hidden = false;
    show();
    button.addEventListener("click", async () => {
      if (notifyOn()) localStorage.removeItem(NOTIFY_KEY);
      else if ((await Notification.requestPermission()) === "granted") localStorage.setItem(NOTIFY_KEY, "on");
      show();
    });
  }
  // Hidden characters (bidi controls, zero-width, controls) as visible markers, as the
  // pages show them: a run ID cannot reorder the notification's text.
  const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]/g;
  function shown(text) {
    return text.replace(HIDDEN, (ch) => "⟨U+" + ch.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "⟩");
  }

  function maybeNotify(change) {
    if (!notifyOn() || !document.hidden) return;
    if (change.action !== "created" || change.status !== "pending") return;
    const note = new Notification("golem: a run waits for a decision", {
      body: shown((change.agent || "") + " · run " + String(change.run_id).slice(-12)), tag: change.run_id,
    });
    note.onclick = () => { window.focus(); location.assign("/runs/" + encodeURIComponent(change.run_id)); };
  }

  let reconnectDelay = 2000;  // after a refused stream (503 while the store is away): back off

  function connect() {
    const url = document.body.dataset.stream;
    if (!url || !window.EventSource) return;
    const dot = $("#live-dot");
    const runId = document.body.dataset.run || "";
    const related = new Set(runId ? [runId] : []);
    for (const a of $$("a[href^='/runs/']")) related.add(decodeURIComponent(a.getAttribute("href").slice(6)));
    let timer = null;
    const source = new EventSource(url);  // same origin: the session cookie authenticates it
    source.addEventListener("open", () => { reconnectDelay = 2000; if (dot) dot.dataset.state = "open"; });
    source.addEventListener("error", () => {
      if (dot) dot.dataset.state = source.readyState === 2 ? "error" : "";
      if (source.readyState !== 2) return;  // EventSource reconnects by itself
      // refused (a 503 while the store is away, a 429): EventSource gives up; try again later
      source.close();
      setTimeout(connect, reconnectDelay);
      reconnectDelay = Math.min(reconnectDelay * 2, 60000);
    });
    source.addEventListener("change", (ev) => {
      let change;
      try { change = JSON.parse(ev.data); } catch (err) { return; }
      if (runId && !related.has(change.run_id) && change.parent_run_id !== runId) return;
      if (change.run_id) related.add(change.run_id);
      maybeNotify(change);
      announce(change.action === "created" ? "A new run arrived." : "Run " + change.action + ".");
      clearTimeout(timer);
      timer = setTimeout(refresh, 120);
    });
  }

  // ------------------------------------------------------------------ keyboard
  function focusCard(card) {
    if (!card) return;
    card.focus();
    card.scrollIntoView({ block: "nearest" });
  }

  function onKey(ev) {
    if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const help = $("#help");
    const target = ev.target;
    if (help && help.open) return;  // the dialog handles its own keys (Esc closes it)
    const typing = target.closest && target.closest("input, textarea, select, [contenteditable]");
    if (ev.key === "Escape") {
      if (typing) target.blur();
      return;
    }
    if (typing) return;
    const cards = $$("[data-call]");
    const card = target.closest ? target.closest("[data-call]") : null;  // the focused card only
    const at = cards.indexOf(card);
    const focusIn = (sel) => { const el = card && $(sel, card); if (el) { el.focus(); el.scrollIntoView({ block: "nearest" }); } return el; };
    switch (ev.key) {
      case "j": focusCard(cards[Math.min(at + 1, cards.length - 1)]); break;
      case "k": focusCard(cards[Math.max(at - 1, 0)]); break;
      case "a": if (!focusIn("[data-approve]")) return; break;
      case "d": if (!focusIn("[data-deny]")) return; break;
      case "e": if (!focusIn("[data-external]")) return; break;
      case "o": { const link = card && $("[data-open]", card); if (!link) return; link.click(); break; }
      case "u": if (!undoLast()) return; break;
      case "g": location.assign("/"); break;
      case "?": if (!help) return; help.showModal(); break;
      default: return;
    }
    ev.preventDefault();
  }

  // ------------------------------------------------------------------ deciding
  // With the script, a decision is held for the undo window (body data-undo seconds):
  // its card is hidden, focus moves to the next card and a toast offers Undo (or u).
  // Then it is posted in the background and the page is patched in place, so the scroll
  // position is kept. Leaving the page sends a held decision at once. If the session has
  // ended, the typed text is kept and the user comes back to the same card after sign-in.
  const UNDO_MS = Math.max(0, Number(document.body.dataset.undo || 0) * 1000);
  let held = null;

  function toast(text, { undo = false, error = false } = {}) {
    const box = $("#toast");
    if (!box) return;
    $("#toast-text").textContent = text;
    $("#toast-undo").hidden = !undo;
    box.classList.toggle("error", error);
    box.hidden = false;
    clearTimeout(box.timer);
    if (!undo) box.timer = setTimeout(() => { box.hidden = true; }, error ? 12000 : 5000);
    announce(text);
  }

  function nextVisibleCard(from) {
    const cards = $$("[data-call]").filter((c) => !c.closest("[hidden]"));
    const all = $$("[data-call]");
    const at = all.indexOf(from);
    return cards.find((c) => all.indexOf(c) > at) || cards[cards.length - 1] || null;
  }

  function keepDrafts(scope) {
    for (const field of $$("textarea, input[type=text]", scope)) {
      const card = field.closest("[data-call]");
      if (card && field.value) sessionStorage.setItem("golem-draft:" + card.id + ":" + field.name, field.value);
    }
  }

  function restoreDrafts() {
    for (const card of $$("[data-call]")) {
      for (const field of $$("textarea, input[type=text]", card)) {
        const key = "golem-draft:" + card.id + ":" + field.name;
        const value = sessionStorage.getItem(key);
        if (value !== null) { field.value = value; sessionStorage.removeItem(key); }
      }
    }
    const target = location.hash && document.getElementById(location.hash.slice(1));
    if (target && target.matches("[data-call]")) focusCard(target);
  }

  async function send(h) {
    held = null;
    $("#toast").hidden = true;
    let res;
    try {
      res = await fetch(h.form.action, { method: "POST", body: h.body, credentials: "same-origin" });
    } catch (err) {
      h.scope.hidden = false;
      toast("Not sent (network error): " + h.label + ". Try again.", { error: true });
      return;
    }
    if (res.status === 401) {
      h.scope.hidden = false;
      keepDrafts(h.scope);
      const back = location.pathname + location.search + "#" + (h.card ? h.card.id : "");
      location.assign("/login?" + new URLSearchParams({ next: back }));
      return;
    }
    if (!res.ok) {
      h.scope.hidden = false;
      const page = new DOMParser().parseFromString(await res.text(), "text/html");
      const why = page.querySelector(".error-box, main p");
      toast(h.label + " was not recorded: " + (why ? why.textContent.trim() : res.status), { error: true });
      refresh();
      return;
    }
    toast(h.label + ".");
    refresh();
  }

  function undoLast() {
    if (!held) return false;
    clearTimeout(held.timer);
    const h = held;
    held = null;
    h.scope.hidden = false;
    if (h.card) focusCard(h.card);
    toast("Undone: " + h.label.replace(/^\w+/, (w) => w.toLowerCase()) + " was not sent.");
    return true;
  }

  function onSubmit(ev) {
    const form = ev.target;
    const button = ev.submitter || form.querySelector("button[type=submit]");
    if (!form.matches("[data-decide]") || !UNDO_MS || !window.fetch) {
      if (button) setTimeout(() => { button.disabled = true; }, 0);
      return;
    }
    ev.preventDefault();
    if (held) { clearTimeout(held.timer); send(held); }
    const card = form.closest("[data-call]");
    const scope = card || form.closest(".run-group") || form;
    const body = new URLSearchParams(new FormData(form, ev.submitter || undefined));
    const label = form.dataset.label || "Decision";
    const next = card ? nextVisibleCard(card) : null;
    scope.hidden = true;
    if (next && next !== card) focusCard(next); else $("#main").focus();
    held = { form, body, card, scope, label };
    held.timer = setTimeout(() => send(held), UNDO_MS);
    toast(label + " — sending in " + Math.round(UNDO_MS / 1000) + " s", { undo: true });
  }

  function onLeave() {
    if (!held) return;
    clearTimeout(held.timer);
    navigator.sendBeacon(held.form.action, held.body);
    held = null;
  }

  document.addEventListener("DOMContentLoaded", () => {
    loginFromFragment();
    tick();
    setInterval(tick, 30000);
    connect();
    document.addEventListener("keydown", onKey);
    document.addEventListener("submit", onSubmit);
    document.addEventListener("input", (ev) => { if (ev.target.matches("textarea[data-original]")) showDiff(ev.target); });
    window.addEventListener("pagehide", onLeave);
    const undo = $("#toast-undo");
    if (undo) undo.addEventListener("click", undoLast);
    restoreDrafts();
    setupBrowserNotify();
  });
})();
