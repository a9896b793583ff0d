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
    const wanted = Array.from(fresh.children).map((n) => {
      const kept = old.get(n.id);
      return kept && kept.dataset.v === n.dataset.v ? kept : document.importNode(n, true);
    });
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

  function connect() {
    const url = document.body.dataset.stream;
    if (!url || !window.EventSource) return;
    const dot = $("#live-dot");
    const runId = document.body.dataset.run || "";
    const related = new Set(runId ? [runId] : []);
    for (const a of $$("a[href^='/runs/']")) related.add(decodeURIComponent(a.getAttribute("href").slice(6)));
    let timer = null;
    const source = new EventSource(url);  // same origin: the session cookie authenticates it
    source.addEventListener("open", () => { if (dot) dot.dataset.state = "open"; });
    source.addEventListener("error", () => { if (dot) dot.dataset.state = source.readyState === 2 ? "error" : ""; });
    source.addEventListener("change", (ev) => {
      let change;
      try { change = JSON.parse(ev.data); } catch (err) { return; }
      if (runId && !related.has(change.run_id) && change.parent_run_id !== runId) return;
      if (change.run_id) related.add(change.run_id);
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
    const typing = target.closest && target.closest("input, textarea, select, [contenteditable]");
    if (ev.key === "Escape") {
      if (help && !help.hidden) help.hidden = true;
      else if (typing) target.blur();
      return;
    }
    if (typing) return;
    const cards = $$("[data-call]");
    const current = target.closest ? target.closest("[data-call]") : null;
    const card = current || cards[0];
    const at = cards.indexOf(current);
    const focusIn = (sel) => { const el = card && $(sel, card); if (el) { el.focus(); el.scrollIntoView({ block: "nearest" }); } return el; };
    switch (ev.key) {
      case "j": focusCard(cards[Math.min(at + 1, cards.length - 1)]); break;
      case "k": focusCard(cards[Math.max(at - 1, 0)]); break;
      case "a": if (!focusIn("[data-approve]")) return; break;
      case "d": if (!focusIn("[data-deny]")) return; break;
      case "e": if (!focusIn("[data-external]")) return; break;
      case "o": { const link = card && $("[data-open]", card); if (!link) return; link.click(); break; }
      case "g": location.assign("/"); break;
      case "?": if (!help) return; help.hidden = !help.hidden; break;
      default: return;
    }
    ev.preventDefault();
  }

  // A second click while a decision is being submitted would only repeat it (the
  // store treats that as a no-op), but disabling the button makes that visible.
  function onSubmit(ev) {
    const button = ev.target.querySelector("button[type=submit]");
    if (button) setTimeout(() => { button.disabled = true; }, 0);
  }

  document.addEventListener("DOMContentLoaded", () => {
    loginFromFragment();
    tick();
    setInterval(tick, 30000);
    connect();
    document.addEventListener("keydown", onKey);
    document.addEventListener("submit", onSubmit);
  });
})();
