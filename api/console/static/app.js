// ztpd web console. Plain ES2020, no build step, no library.
// The server renders a page shell (<main data-page="...">) without data;
// this script fills it from the REST API (/api/v1) with the session cookie
// and keeps it live from the server's event stream (/ui/stream). Writes
// carry the session's CSRF token (X-CSRF-Token). Data is only ever put in
// the page as text (textContent, attributes), never parsed as HTML.
'use strict';
(() => {
  window.ztpdLoadedAt = Date.now();
  const main = document.querySelector('main[data-page]');
  const pageName = main ? main.dataset.page : '';
  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const csrf = csrfMeta ? csrfMeta.content : '';
  const isAdmin = document.body.dataset.role === 'admin';
  const enc = encodeURIComponent;
  let loadedCount = 0;
  // body[data-loaded] counts renders of the page's data (tests wait on it).
  const loaded = () => { document.body.dataset.loaded = String(++loadedCount); };

  // ---- helpers ----------------------------------------------------------

  const $ = (sel, root = document) => root.querySelector(sel);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // el builds an element: props are attributes, except text (textContent),
  // class, data (dataset) and on<event> (listeners); children are nodes or
  // strings (text).
  function el(tag, props, ...kids) {
    const n = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v == null || v === false) continue;
        if (k === 'text') n.textContent = String(v);
        else if (k === 'class') n.className = v;
        else if (k === 'data') Object.assign(n.dataset, v);
        else if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
        else n.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const k of kids.flat()) {
      if (k == null || k === false) continue;
      n.append(k instanceof Node ? k : String(k));
    }
    return n;
  }

  class APIError extends Error {
    constructor(status, code, message) {
      super(message || 'request failed');
      this.status = status;
      this.code = code || '';
    }
  }

  // api calls the REST API. Errors carry the API's own message.
  async function api(path, { method = 'GET', body } = {}) {
    const headers = { Accept: 'application/json' };
    if (method !== 'GET' && method !== 'HEAD') headers['X-CSRF-Token'] = csrf;
    let payload;
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      payload = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch('/api/v1' + path, { method, headers, body: payload, credentials: 'same-origin', cache: 'no-store' });
    } catch (e) {
      throw new APIError(0, 'network', 'ztpd did not answer: ' + e.message);
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (e) { data = text; }
    }
    if (res.status === 401 && csrf) {
      // The session ended (expired, signed out elsewhere, key revoked):
      // the page itself now answers the sign-in form.
      setStatus('Your session ended. Reload the page to sign in again.', 'error');
    }
    if (!res.ok) {
      const e = data && data.error ? data.error : {};
      throw new APIError(res.status, e.code, e.message || res.status + ' ' + res.statusText);
    }
    return data;
  }

  // items is a list answer's items (a page envelope or a bare array).
  const items = (r) => (Array.isArray(r) ? r : r && Array.isArray(r.items) ? r.items : []);

  // listAll reads every page of a list (small lists: clusters, images).
  async function listAll(path) {
    const out = [];
    let cursor = '';
    for (let i = 0; i < 50; i++) {
      const sep = path.includes('?') ? '&' : '?';
      const r = await api(path + sep + 'limit=1000' + (cursor ? '&cursor=' + enc(cursor) : ''));
      out.push(...items(r));
      cursor = r && r.next_cursor;
      if (!cursor) break;
    }
    return out;
  }

  function setStatus(msg, kind, target) {
    const n = target || $('#status');
    if (!n) return;
    n.textContent = msg || '';
    n.className = 'status' + (kind ? ' ' + kind : '');
  }
  const showError = (e, target) => setStatus(e && e.message ? e.message : String(e), 'error', target);
  function formError(form, e) {
    const n = $('.form-error', form) || (form.parentElement && $('.form-error', form.parentElement));
    if (n) n.textContent = e ? (e.message || String(e)) : '';
  }

  const fmtLong = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
  const fmtTime = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });
  const fmtDay = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: 'numeric', minute: '2-digit', second: '2-digit' });
  const fmtYear = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
  // fmtCompact is for tables and event lists: the time alone today, the
  // day and time this year, else the date.
  function fmtCompact(d) {
    const now = new Date();
    if (d.toDateString() === now.toDateString()) return fmtTime.format(d);
    if (d.getFullYear() === now.getFullYear()) return fmtDay.format(d);
    return fmtYear.format(d);
  }
  // timeEl shows a time in the browser's zone (compact in tables and
  // lists, in full in facts); its title is the UTC value.
  function timeEl(iso, short) {
    if (!iso || iso.startsWith('0001-')) return el('span', { class: 'muted', text: '—' });
    const d = new Date(iso);
    if (isNaN(d)) return el('span', { text: iso });
    const utc = d.toISOString();
    const text = short ? fmtCompact(d) : fmtLong.format(d);
    return el('time', { datetime: utc, title: utc, text });
  }

  function humanSize(n) {
    if (n == null || isNaN(n)) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    let v = Number(n);
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(v < 10 ? 2 : 1) : String(v)) + ' ' + units[i];
  }

  const dash = (v) => (v === undefined || v === null || v === '' ? '—' : String(v));
  // td is a table cell; an empty one says so with a dash (and class empty:
  // the narrow layout, where each row is a card, leaves it out).
  const td = (v, cls) => {
    const none = v instanceof Node ? v.textContent === '—' : dash(v) === '—';
    return el('td', { class: [cls, none ? 'empty' : ''].filter(Boolean).join(' ') || null }, v instanceof Node ? v : dash(v));
  };
  const stateBadge = (s) => el('span', { class: 'badge st-' + String(s || '').toLowerCase(), text: dash(s) });
  const deviceLink = (id, text) => el('a', { href: '/devices/' + enc(id), text: text || id });
  const clusterLink = (id, text) => el('a', { href: '/clusters/' + enc(id), text: text || id });
  // hash shows a digest cut to fit (the whole in its title, and copied
  // whole), or in full over two lines where the page is about digests.
  const hash = (h, full) => (h ? el('code', { class: full ? 'hash full' : 'hash', title: h, text: h }) : '—');
  // versionLabel names a Kubernetes version once when its name is its
  // semver ("v1.31.4"), else as "name (semver)".
  const versionLabel = (v) => (!v || !v.name ? '' : v.name.replace(/^v/, '') === v.semver ? v.name : `${v.name} (${v.semver})`);

  // meter is a horizontal bar of used out of total; progress bars (done
  // out of all) are not coloured as filling up.
  function meter(used, total, label, progress) {
    const pct = total > 0 ? Math.min(100, (used * 100) / total) : 0;
    const heat = progress ? (pct >= 100 ? ' full' : '') : pct >= 90 ? ' hot' : pct >= 75 ? ' warm' : '';
    const fill = el('span', { class: 'meter-fill' + heat });
    fill.style.width = pct.toFixed(1) + '%'; // CSSOM: allowed by the CSP, unlike style=""
    return el('span', { class: 'meter', role: 'img', 'aria-label': label, title: label }, fill);
  }

  // barChart is a small SVG bar chart (values oldest first).
  function barChart(values, labels, what, utc) {
    const NS = 'http://www.w3.org/2000/svg';
    const svgEl = (tag, attrs, text) => {
      const n = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, String(v));
      if (text != null) n.textContent = text;
      return n;
    };
    const step = 26, h = 90, top = 14, max = Math.max(1, ...values);
    const w = step * values.length;
    const total = values.reduce((a, b) => a + b, 0);
    const svg = svgEl('svg', { viewBox: `0 0 ${w} ${h + top + 16}`, class: 'bars', role: 'img',
      'aria-label': `${what}: ${total} in total` });
    values.forEach((v, i) => {
      const bh = Math.round((v / max) * h);
      const g = svgEl('g');
      g.append(svgEl('title', null, `${labels[i]} (${utc ? utc[i] : ''}): ${v} joined`));
      g.append(svgEl('rect', { x: i * step + 3, y: top + h - bh, width: step - 6, height: Math.max(bh, 1), class: v ? 'bar' : 'bar zero' }));
      if (v) g.append(svgEl('text', { x: i * step + step / 2, y: top + h - bh - 3, 'text-anchor': 'middle', class: 'val' }, String(v)));
      svg.append(g);
    });
    if (labels.length) {
      svg.append(svgEl('text', { x: 2, y: h + top + 13, class: 'axis' }, labels[0]));
      svg.append(svgEl('text', { x: w - 2, y: h + top + 13, 'text-anchor': 'end', class: 'axis' }, labels[labels.length - 1]));
    }
    return svg;
  }

  // throttle runs fn at most once per ms, and once more after a burst.
  function throttle(fn, ms) {
    let timer = null, again = false;
    const run = () => {
      timer = setTimeout(() => {
        timer = null;
        if (again) { again = false; fire(); }
      }, ms);
      Promise.resolve().then(fn).catch((e) => showError(e));
    };
    const fire = () => { if (timer) { again = true; return; } run(); };
    return fire;
  }

  // confirmButton asks for a second click within 5 s before running act;
  // it makes the button, or wires the page's own (existing).
  function confirmButton(label, act, cls, existing) {
    let armed = null;
    const b = existing || el('button', { type: 'button', class: cls, text: label });
    b.addEventListener('click', async () => {
      if (!armed) {
        b.textContent = 'Confirm ' + label.toLowerCase();
        b.classList.add('armed');
        armed = setTimeout(() => { armed = null; b.textContent = label; b.classList.remove('armed'); }, 5000);
        return;
      }
      clearTimeout(armed);
      armed = null;
      b.disabled = true;
      try { await act(); } finally { b.disabled = !!b.dataset.off; b.textContent = label; b.classList.remove('armed'); }
    });
    return b;
  }

  // openStream follows /ui/stream; onUpdate gets each coalesced update,
  // onHello (optional) each (re)connection: what changed between the
  // page's first fetch and the stream's start is only seen by fetching.
  function openStream(onUpdate, onHello) {
    if (!window.EventSource) return;
    const live = $('#live');
    const es = new EventSource('/ui/stream');
    es.addEventListener('open', () => { if (live) { live.className = 'live on'; live.title = 'Live updates: connected'; live.setAttribute('aria-label', live.title); } });
    es.addEventListener('error', () => { if (live) { live.className = 'live off'; live.title = 'Live updates: reconnecting'; live.setAttribute('aria-label', live.title); } });
    if (onHello) es.addEventListener('hello', () => { try { onHello(); } catch (e) { showError(e); } });
    es.addEventListener('update', (ev) => {
      let m;
      try { m = JSON.parse(ev.data); } catch (e) { return; }
      try { onUpdate(m); } catch (e) { showError(e); }
    });
    window.addEventListener('pagehide', () => es.close());
  }

  // followJob polls an async job until it ends; progress(job) may say more.
  async function followJob(job, target, what, progress) {
    const start = Date.now();
    let j = job;
    while (j.status === 'pending') {
      let more = '';
      if (progress) { try { more = await progress(j); } catch (e) { more = ''; } }
      setStatus(`${what}: in progress, ${Math.round((Date.now() - start) / 1000)} s${more ? ' — ' + more : ''}`, 'busy', target);
      await sleep(1000);
      j = await api('/jobs/' + enc(j.id));
    }
    if (j.status !== 'succeeded') {
      const e = j.error || {};
      throw new APIError(0, e.code, `${what} failed: ${e.message || j.status}`);
    }
    setStatus(`${what}: done`, 'ok', target);
    return j;
  }

  // clusterProgress describes a cluster while a job works on it.
  async function clusterProgress(j) {
    if (!j.instance_id) return '';
    const c = await api('/clusters/' + enc(j.instance_id));
    const r = membersReady(c);
    return `${c.state}, members ready ${r.ready}/${r.desired}`;
  }

  function membersReady(c) {
    const ms = c.members || [];
    return { ready: ms.filter((m) => m.state === 'joined').length, desired: (c.size || 0) + (c.control_nodes || 0) };
  }

  // setPager enables the pager's buttons; the focus, when on a button that
  // gets disabled (Next on reaching the last page), moves to the other one
  // rather than falling out of the page.
  function setPager(prevOff, nextOff) {
    const prev = $('#page-prev'), next = $('#page-next');
    const had = document.activeElement;
    prev.disabled = prevOff;
    next.disabled = nextOff;
    if (had === next && nextOff && !prevOff) prev.focus();
    else if (had === prev && prevOff && !nextOff) next.focus();
  }

  function fillSelect(sel, options, keepFirst) {
    const first = keepFirst ? [...sel.options].slice(0, keepFirst) : [];
    sel.replaceChildren(...first, ...options.map(([value, text]) => el('option', { value, text })));
  }

  function formValues(form) {
    const out = {};
    for (const [k, v] of new FormData(form)) if (typeof v === 'string') out[k] = v.trim();
    return out;
  }

  const uuidRE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  const isoRE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

  // withTimes splits text at the RFC 3339 times in it and shows those as
  // times (local, UTC on hover), the rest as text.
  const isoInRE = /(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))/;
  const withTimes = (text) => String(text).split(isoInRE).map((part, i) => (i % 2 ? timeEl(part, true) : part)).filter((p) => p !== '');

  // eventFields are an event's fields less what its line already says: a
  // value its message contains, the device or cluster it names, and the
  // key of a key that has a name (the name is shown).
  function eventFields(e) {
    const fs = e.fields || {};
    const msg = e.message || '';
    return Object.entries(fs).filter(([k, v]) => v !== '' && v != null && !msg.includes(String(v)) &&
      !(k === 'device' && v === e.device) && !(k === 'cluster' && v === e.cluster) && !(k === 'api_key' && fs.key_name) &&
      !(msg && uuidRE.test(String(v)))) // an ID the message names the thing of
      .map(([k, v]) => [k === 'key_name' ? 'by' : k.replace(/_/g, ' '), String(v)]);
  }

  function eventItem(e, opts = {}) {
    const li = el('li', { data: { seq: e.seq } });
    li.append(timeEl(e.time, true), ' ', el('span', { class: 'etype', text: e.type }));
    if (e.device && !opts.noDevice) li.append(' ', deviceLink(e.device));
    if (e.cluster && opts.clusterNames) li.append(' ', clusterLink(e.cluster, opts.clusterNames.get(e.cluster)));
    if (e.message) li.append(' ', el('span', { class: 'emsg' }, withTimes(e.message)));
    const f = eventFields(e);
    if (f.length) {
      // A field that is a time is shown as one (local, UTC on hover).
      const parts = f.flatMap(([k, v], i) => [i ? ' · ' : '', `${k} `, isoRE.test(v) ? timeEl(v, true) : v]);
      li.append(el('span', { class: 'efields' }, parts));
    }
    return li;
  }

  function facts(dl, pairs) {
    const kids = [];
    for (const [k, v] of pairs) {
      if (v === undefined || v === null || v === '') continue;
      kids.push(el('dt', { text: k }), el('dd', null, v instanceof Node ? v : String(v)));
    }
    dl.replaceChildren(...kids);
  }

  async function clusterNameMap() {
    const m = new Map();
    try { for (const c of await listAll('/clusters?listall=true')) m.set(c.id, c.name); } catch (e) { /* names only */ }
    return m;
  }

  // ---- overview ---------------------------------------------------------

  const stateOrder = ['discovered', 'leased', 'ztp-served', 'config-served', 'image-served', 'waiting', 'join-issued',
    'joined', 'not-ready', 'lost', 'failed', 'leaving', 'left'];

  function statCard(label, n, href, cls) {
    return el('a', { class: 'stat ' + (cls || ''), href }, el('span', { class: 'n', text: String(n) }), el('span', { class: 'l', text: label }));
  }

  async function overviewPage() {
    let data = null;
    const renderCounts = () => {
      const d = data.devices || {};
      const by = d.by_state || {};
      const states = [...stateOrder.filter((s) => by[s]), ...Object.keys(by).filter((s) => !stateOrder.includes(s) && by[s])];
      $('#ov-states').replaceChildren(
        statCard('total', d.total || 0, '/devices', 'total'),
        ...states.map((s) => statCard(s, by[s], '/devices?state=' + enc(s), 'st-' + s)),
        statCard('unmatched / refused', d.unmatched || 0, '/devices?state=unmatched', d.unmatched ? 'st-failed' : ''));
      const kinds = d.by_kind || {};
      $('#ov-kinds').replaceChildren(...Object.keys(kinds).sort().map((k) => statCard(k, kinds[k], '/devices?kind=' + enc(k))));
    };
    const renderEvents = () => {
      const evs = data.events || [];
      $('#ov-events').replaceChildren(...(evs.length ? evs.map((e) => eventItem(e)) : [el('li', { class: 'muted', text: 'No events yet.' })]));
    };
    const render = () => {
      renderCounts();
      const o = data.onboarding || { joined: [], bucket_seconds: 300 };
      const from = o.from ? new Date(o.from).getTime() : Date.now() - 3600e3;
      const tf = new Intl.DateTimeFormat(undefined, { timeStyle: 'short' });
      const joined = o.joined || [];
      const mins = Math.round(o.bucket_seconds / 60);
      const labels = joined.map((_, i) => tf.format(new Date(from + i * o.bucket_seconds * 1000)));
      const utc = joined.map((_, i) => new Date(from + i * o.bucket_seconds * 1000).toISOString());
      const total = joined.reduce((a, b) => a + b, 0);
      $('#ov-onboarding').replaceChildren(barChart(joined, labels, `devices joined per ${mins} minutes`, utc),
        el('p', { class: 'muted', id: 'ov-onboarding-total',
          text: total ? `${total} joined in the last hour (bars: ${mins} minutes each).` : 'No device joined in the last hour.' }));
      renderPools($('#ov-pools'), data.pools || []);
      const cl = data.clusters || [];
      $('#ov-clusters').replaceChildren(cl.length ? el('div', { class: 'table-wrap' }, el('table', { class: 'data', id: 'ov-cluster-table' },
        el('thead', null, el('tr', null, el('th', { scope: 'col', text: 'Name' }), el('th', { scope: 'col', text: 'State' }), el('th', { scope: 'col', text: 'Ready' }))),
        el('tbody', null, cl.map((c) => el('tr', { data: { id: c.id } }, td(clusterLink(c.id, c.name)), td(stateBadge(c.state)),
          td(`${c.members_ready}/${c.members_desired}`)))))) : el('p', { class: 'muted', text: 'No clusters yet.' }));
      const w = (data.warnings || []).map((t) => el('li', { text: t }));
      // Devices whose last ZTP request got no content are a warning too:
      // each one waits for the operator (a profile, an image, a binding).
      const un = (data.devices || {}).unmatched || 0;
      if (un) {
        w.unshift(el('li', { id: 'ov-warning-unmatched' }, `${un} device${un === 1 ? '' : 's'} asked for content and got none: `,
          el('a', { href: '/devices?state=unmatched', text: 'see why' })));
      }
      $('#ov-warnings').replaceChildren(...(w.length ? w : [el('li', { class: 'muted ok', text: 'No warnings.' })]));
      renderEvents();
    };
    const load = async () => { data = await api('/overview'); render(); loaded(); };
    const refresh = throttle(load, 5000);
    try { await load(); } catch (e) { showError(e); }
    openStream((m) => {
      if (!data) return;
      if (m.counts) { data.devices = m.counts; renderCounts(); }
      if (m.events && m.events.length) {
        data.events = [...m.events.slice().reverse(), ...(data.events || [])].slice(0, 10);
        renderEvents();
        refresh(); // onboarding, pools, clusters, warnings
      }
      loaded();
    });
  }

  function renderPools(target, pools) {
    if (!pools.length) {
      target.replaceChildren(el('p', { class: 'muted', text: 'No DHCP pools: this ztpd hands out no addresses (no dhcp.subnets or --dhcp-range in its configuration).' }));
      return;
    }
    target.replaceChildren(...pools.map((p) => {
      const label = `${p.subnet}: ${p.used} of ${p.size} used, ${p.reserved} reserved, ${p.free} free`;
      return el('div', { class: 'pool', data: { subnet: p.subnet } },
        el('div', { class: 'pool-head' }, el('strong', { text: p.name ? `${p.name} ${p.subnet}` : p.subnet }), el('span', { class: 'muted', text: ` ${p.range_start} – ${p.range_end}` })),
        meter(p.used, p.size, label),
        el('div', { class: 'muted small', text: `${p.used} used · ${p.reserved} reserved · ${p.free} free of ${p.size}` }));
    }));
  }

  // ---- devices ----------------------------------------------------------

  async function devicesPage() {
    const form = $('#device-filter');
    const tbody = $('#devices tbody');
    const keys = ['q', 'state', 'kind', 'cluster'];
    const initial = new URLSearchParams(location.search);
    const names = await clusterNameMap();
    fillSelect(form.elements.cluster, [...names].map(([id, name]) => [id, name]), 1);
    for (const k of keys) if (initial.get(k)) form.elements[k].value = initial.get(k);
    let cursors = [''], idx = 0, next = '', rows = new Map(), seq = 0;
    const filters = () => {
      const f = {};
      for (const k of keys) { const v = form.elements[k].value.trim(); if (v) f[k] = v; }
      return f;
    };
    const matches = (d, f) => {
      if (f.state === 'unmatched' ? !(d.refusal && (d.refusal.reason || d.refusal.kind)) : f.state && d.state !== f.state) return false;
      if (f.kind && d.kind !== f.kind) return false;
      if (f.cluster && d.cluster !== f.cluster) return false;
      if (f.q) {
        const q = f.q.toLowerCase();
        return [d.serial, d.mac, d.ip, d.hostname, d.product, d.profile, d.id].some((v) => v && v.toLowerCase().includes(q));
      }
      return true;
    };
    const fillRow = (tr, d) => {
      const r = d.refusal && (d.refusal.reason || d.refusal.kind) ? d.refusal : null;
      const st = el('td', { class: 'state st-' + d.state, text: d.state });
      tr.classList.toggle('refused', !!r);
      tr.replaceChildren(st, td(d.kind), td(d.serial), td(deviceLink(d.id, d.mac || d.id), 'mono'), td(d.ip, 'mono'),
        td(d.product), td(d.profile), td(d.cluster ? clusterLink(d.cluster, names.get(d.cluster)) : ''), td(d.role),
        td(timeEl(d.last_seen, true)),
        r ? el('td', { class: 'reason', title: r.what ? `${r.what} (${r.kind})` : r.kind }, r.reason || r.kind) : td(''));
    };
    const load = async () => {
      const my = ++seq;
      const f = filters();
      const q = new URLSearchParams(f);
      q.set('limit', '100');
      if (cursors[idx]) q.set('cursor', cursors[idx]);
      const r = await api('/devices?' + q);
      if (my !== seq) return; // a newer load is under way
      next = r.next_cursor || '';
      const list = items(r);
      rows = new Map();
      const frag = document.createDocumentFragment();
      for (const d of list) {
        const tr = el('tr', { data: { id: d.id } });
        fillRow(tr, d);
        rows.set(d.id, tr);
        frag.append(tr);
      }
      if (!list.length) {
        const any = Object.keys(f).length > 0;
        frag.append(el('tr', null, el('td', { colspan: 11, class: 'muted',
          text: any ? 'No devices match.' : 'No devices yet: a device appears here when it first asks ztpd for an address or its ZTP content.' })));
      }
      tbody.replaceChildren(frag);
      setPager(idx === 0, !next);
      $('#page-info').textContent = list.length ? `Page ${idx + 1}: devices ${idx * 100 + 1}–${idx * 100 + list.length}${next ? '' : ' (last page)'}` : '';
      const qs = new URLSearchParams(f).toString();
      history.replaceState(null, '', location.pathname + (qs ? '?' + qs : ''));
      setStatus('');
      loaded();
    };
    const reload = () => { cursors = ['']; idx = 0; return load().catch(showError); };
    const refetch = throttle(load, 1500);
    form.addEventListener('submit', (e) => { e.preventDefault(); reload(); });
    for (const k of ['state', 'kind', 'cluster']) form.elements[k].addEventListener('change', reload);
    let typing = null;
    form.elements.q.addEventListener('input', () => { clearTimeout(typing); typing = setTimeout(reload, 300); });
    $('#page-next').addEventListener('click', () => { if (!next) return; cursors[idx + 1] = next; idx++; load().catch(showError); });
    $('#page-prev').addEventListener('click', () => { if (idx === 0) return; idx--; load().catch(showError); });
    await reload();
    openStream((m) => {
      const f = filters();
      let missing = false, gone = false, changed = false;
      const ids = [...rows.keys()];
      for (const d of m.devices || []) {
        const tr = rows.get(d.id);
        if (tr) {
          fillRow(tr, d);
          changed = true;
          if (!matches(d, f)) gone = true;
        } else if (matches(d, f) && (!next || d.id < ids[ids.length - 1]) && (idx === 0 || d.id > ids[0])) {
          missing = true; // it belongs on this page
        }
      }
      if (m.more || missing || gone) refetch();
      if (changed) loaded();
    });
  }

  // ---- device -----------------------------------------------------------

  async function devicePage() {
    const id = main.dataset.id;
    const [names, first] = await Promise.all([clusterNameMap(), api('/devices/' + enc(id)).catch((e) => e)]);
    if (first instanceof Error) { showError(first); return; }
    let dev = first;
    const renderFacts = () => {
      const r = dev.refusal && (dev.refusal.reason || dev.refusal.kind) ? dev.refusal : null;
      $('#device-title').textContent = `Device ${dev.serial || dev.mac || dev.id}`;
      facts($('#device-facts'), [
        ['State', el('span', { class: 'state badge st-' + dev.state, id: 'device-state', text: dev.state })],
        // A wait (kind "waiting") is no refusal: the device is told what it waits for.
        [r && r.kind === 'waiting' ? 'Waiting' : 'Refused', r ? `${r.reason || r.kind}${r.what ? ' (' + r.what + ')' : ''}` : ''],
        [r && r.kind === 'waiting' ? 'Waiting since' : 'Refused at', r && r.at ? timeEl(r.at) : ''],
        ['Serial conflict', dev.serial_conflict ? `serial ${dev.serial_conflict.serial} is stated by ${(dev.serial_conflict.with || []).join(', ')} too: actions by this serial are refused, act by MAC` : ''],
        ['Kind', dev.kind], ['ID', dev.id], ['MAC', dev.mac], ['Serial', dev.serial], ['Product', dev.product],
        ['Platform', dev.platform], ['Hostname', dev.hostname], ['SONiC', dev.sonic_version], ['IP', dev.ip],
        ['Fixed IP', dev.fixed_ip], ['Subnet', dev.subnet], ['Relay', dev.relay_addr], ['Circuit ID', dev.circuit_id],
        ['Remote ID', dev.remote_id], ['Base MAC', dev.base_mac], ['Vendor class', dev.vendor_class], ['Client ID', dev.client_id],
        ['Position', dev.position ? el('a', { href: '/positions#pos-' + dev.position, id: 'device-position', text: dev.position }) : ''],
        ['Profile', dev.profile], ['Cluster', dev.cluster ? clusterLink(dev.cluster, names.get(dev.cluster)) : ''],
        ['Role', dev.role], ['Approved', dev.approved ? 'yes' : 'no'],
        ['Labels', dev.labels ? Object.entries(dev.labels).map(([k, v]) => `${k}=${v}`).join(', ') : ''],
        ['First seen', timeEl(dev.first_seen)], ['Last seen', timeEl(dev.last_seen)], ['Updated', timeEl(dev.updated_at)],
      ]);
      // Approve is the action of a device that waits for it; once approved
      // it says so.
      const ab = $('#device-approve');
      if (ab) {
        ab.disabled = !!dev.approved;
        ab.textContent = dev.approved ? 'Approved' : 'Approve';
        ab.classList.toggle('primary', !dev.approved);
        $('#approve-cluster').disabled = !!dev.approved;
      }
    };
    const loadLease = async () => {
      const ls = items(await api('/leases?mac=' + enc(dev.mac)));
      $('#device-lease').replaceChildren(...(ls.length ? ls.map((l) => el('dl', { class: 'facts' },
        el('dt', { text: 'IP' }), el('dd', { text: l.ip }), el('dt', { text: 'State' }), el('dd', { text: l.state }),
        el('dt', { text: 'Subnet' }), el('dd', { text: l.subnet }), el('dt', { text: 'Start' }), el('dd', null, timeEl(l.start)),
        el('dt', { text: 'Expiry' }), el('dd', null, timeEl(l.expiry)), l.reserved ? el('dt', { text: 'Reserved' }) : null,
        l.reserved ? el('dd', { text: 'yes' }) : null)) : [el('p', { class: 'muted', text: 'No lease: ztpd has not given this device an address.' })]));
    };
    const timeline = $('#device-timeline');
    const loadTimeline = async () => {
      const evs = items(await api('/events?device=' + enc(dev.id) + '&tail=200'));
      timeline.replaceChildren(...evs.reverse().map((e) => eventItem(e, { noDevice: true, clusterNames: names })));
      if (!evs.length) timeline.append(el('li', { class: 'muted', text: 'No events recorded for this device.' }));
    };
    const preview = $('#device-preview');
    const loadPreview = async () => {
      if (!preview) return;
      try {
        const p = await api('/devices/' + enc(dev.id) + '/preview');
        const kids = [el('p', null, p.profile ? `A ${dash(p.kind)} device under profile ${p.profile}.` : `A ${dash(p.kind)} device that no profile matches.`)];
        if ((p.warnings || []).length) kids.push(el('ul', { class: 'warnings' }, p.warnings.map((w) => el('li', { text: w }))));
        if ((p.notes || []).length) kids.push(el('ul', { class: 'notes' }, p.notes.map((w) => el('li', { text: w }))));
        if ((p.fetches || []).length) kids.push(el('h3', { text: 'Fetches' }), el('ol', null, p.fetches.map((f) => el('li', null, el('strong', { text: f.what }), ' ', el('code', { text: f.url })))));
        for (const d of p.documents || []) {
          kids.push(el('h3', { text: d.name }), el('p', { class: 'muted small', text: d.content_type }), el('pre', { class: 'code' }, d.body));
        }
        preview.replaceChildren(...kids);
      } catch (e) {
        preview.replaceChildren(el('p', { class: 'muted', text: e.message }));
      }
    };
    renderFacts();
    // The actions work as soon as the device is shown, not only once its
    // lease, timeline and preview are in.
    const form = $('#device-approve-form');
    if (form) {
      fillSelect(form.elements.cluster, [...names].map(([cid, name]) => [cid, name]), 1);
      const act = async (what, path, body) => {
        const st = $('#action-status');
        setStatus(what + '…', 'busy', st);
        try {
          dev = await api('/devices/' + enc(dev.id) + path, { method: 'POST', body });
          renderFacts();
          setStatus(what + ': done', 'ok', st);
          loaded();
        } catch (e) { showError(e, st); }
      };
      form.addEventListener('submit', (e) => { e.preventDefault(); act('Approve', '/approve', { cluster: form.elements.cluster.value }); });
      $('#device-reset').addEventListener('click', () => act('Reset', '/reset', {}));
    }
    await Promise.all([loadLease().catch(showError), loadTimeline().catch(showError), loadPreview()]);
    loaded();
    const refreshSide = throttle(() => Promise.all([loadLease(), loadPreview()]), 3000);
    openStream((m) => {
      let changed = false;
      for (const d of m.devices || []) if (d.id === dev.id) { dev = d; renderFacts(); changed = true; refreshSide(); }
      const mine = (m.events || []).filter((e) => e.device === dev.id);
      if (mine.length) {
        const placeholder = $('li.muted', timeline);
        if (placeholder) placeholder.remove();
        for (const e of mine) if (!$(`li[data-seq="${Number(e.seq)}"]`, timeline)) timeline.prepend(eventItem(e, { noDevice: true, clusterNames: names }));
        changed = true;
      }
      if (changed) loaded();
    });
  }

  // ---- clusters ---------------------------------------------------------

  async function versionOptions(sel, current) {
    const vs = items(await api('/versions'));
    fillSelect(sel, vs.filter((v) => v.state === 'Enabled' || v.id === current).map((v) => [v.id, versionLabel(v)]));
    if (current) sel.value = current;
    return vs;
  }

  async function clustersPage() {
    const tbody = $('#clusters tbody');
    const form = $('#cluster-create');
    const load = async () => {
      const cl = await listAll('/clusters?listall=true');
      tbody.replaceChildren(...cl.map((c) => {
        const r = membersReady(c);
        return el('tr', { data: { id: c.id } }, td(clusterLink(c.id, c.name)), el('td', { class: 'state' }, stateBadge(c.state)),
          td(versionLabel(c.version)), td(`${r.ready}/${r.desired}`, 'ready'), td(c.size),
          td(c.control_nodes), td(c.join_method), td(c.account), td(timeEl(c.created, true)));
      }));
      if (!cl.length) tbody.append(el('tr', null, el('td', { colspan: 9, class: 'muted', text: 'No clusters yet: create one below.' })));
      loaded();
    };
    const [, , offs] = await Promise.all([load().catch(showError), versionOptions(form.elements.version).catch(showError),
      api('/offerings').catch(() => ({ items: [] }))]);
    fillSelect(form.elements.offering, items(offs).map((o) => [o.id, `${o.name} (${o.cpunumber} CPU, ${o.memory} MB)`]));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      formError(form, null);
      const v = formValues(form);
      const body = { name: v.name, description: v.description, version: v.version, offering: v.offering,
        size: parseInt(v.size, 10) || 0, control_nodes: parseInt(v.control_nodes, 10) || 0, join_method: v.join_method };
      const btn = $('button[type=submit]', form);
      btn.disabled = true;
      try {
        const r = await api('/clusters', { method: 'POST', body });
        load().catch(showError);
        const j = await followJob(r.job, $('#job-status'), `Creating ${v.name}`, clusterProgress);
        const link = j.cluster ? clusterLink(j.cluster.id, 'Open ' + j.cluster.name) : null;
        if (link) $('#job-status').append(' ', link);
        form.reset();
        await load();
      } catch (err) {
        formError(form, err);
        load().catch(showError);
      } finally { btn.disabled = false; }
    });
    const refresh = throttle(load, 2000);
    openStream((m) => { if ((m.events || []).some((e) => e.cluster) || (m.devices || []).some((d) => d.cluster)) refresh(); });
  }

  async function clusterPage() {
    const id = main.dataset.id;
    let c;
    const ops = $('#cluster-scale').parentElement;
    const jobStatus = $('#job-status');
    const render = () => {
      const r = membersReady(c);
      $('#cluster-title').textContent = `Cluster ${c.name}`;
      document.title = `${c.name} · ztpd`;
      facts($('#cluster-facts'), [
        ['State', el('span', { class: 'state', id: 'cluster-state' }, stateBadge(c.state))],
        ['Waiting for', c.waiting], ['Members ready', `${r.ready}/${r.desired}`],
        ['Version', versionLabel(c.version)], ['Workers', c.size],
        ['Control planes', c.control_nodes], ['Offering', c.offering_name], ['Join method', c.join_method],
        ['Endpoint', c.endpoint], ['Account', c.account], ['Description', c.description], ['ID', c.id],
        ['Created', timeEl(c.created)], ['Updated', timeEl(c.updated_at)],
      ]);
      // The workers field follows the cluster's size, but a refresh that
      // does not change the size leaves what the operator typed alone.
      const scale = $('#cluster-scale').elements.size;
      if (document.activeElement !== scale && scale.dataset.shown !== String(c.size)) {
        scale.value = c.size;
        scale.dataset.shown = String(c.size);
      }
      $('#members tbody').replaceChildren(...(c.members || []).map((m) => el('tr', { data: { id: m.device } },
        td(deviceLink(m.device)), td(m.role), el('td', { class: 'state st-' + m.state, text: m.state }), td(m.ip, 'mono'),
        td(m.hostname), td(m.node_name), td(m.version))));
      if (!(c.members || []).length) $('#members tbody').append(el('tr', null, el('td', { colspan: 7, class: 'muted', text: 'No members yet: devices join once their profile names this cluster and they are approved.' })));
    };
    const events = $('#cluster-events');
    const loadEvents = async () => {
      const evs = items(await api('/events?cluster=' + enc(id) + '&tail=50'));
      events.replaceChildren(...evs.reverse().map((e) => eventItem(e)));
      if (!evs.length) events.append(el('li', { class: 'muted', text: 'No events for this cluster.' }));
    };
    const rolloutRows = $('#cluster-rollouts tbody');
    $('#cluster-rollouts-all').href = '/rollouts?cluster=' + enc(id);
    const loadRollouts = async () => {
      let list;
      try { list = items(await api('/rollouts?limit=5&cluster=' + enc(id))); } catch (e) {
        rolloutRows.replaceChildren(el('tr', null, el('td', { colspan: 6, class: 'muted', text: e.message })));
        return;
      }
      rolloutRows.replaceChildren(...list.map((r) => rolloutRow(r, null, false)));
      if (!list.length) rolloutRows.append(el('tr', null, el('td', { colspan: 6, class: 'muted', text: 'No rollouts yet: an upgrade or a scale-down runs one over the nodes.' })));
    };
    const fetchCluster = async () => { c = await api('/clusters/' + enc(id)); render(); };
    const load = async () => { await fetchCluster(); loaded(); };
    // The first render counts once the cluster, its events and rollouts are shown.
    try { await Promise.all([fetchCluster(), loadEvents().catch(showError), loadRollouts()]); loaded(); } catch (e) { showError(e); return; }
    versionOptions($('#cluster-upgrade').elements.version, c.version && c.version.id).catch(showError);
    let gone = false; // deleted: nothing more to fetch
    const run = async (what, method, path, body) => {
      formError(ops, null);
      try {
        const r = await api('/clusters/' + enc(id) + path, { method, body });
        gone = method === 'DELETE';
        const j = await followJob(r.job, jobStatus, what, gone ? null : clusterProgress);
        if (method === 'DELETE') { location.assign('/clusters'); return; }
        if (j.cluster) { c = j.cluster; render(); loaded(); } else await load();
      } catch (e) { gone = false; formError(ops, e); load().catch(() => {}); }
    };
    $('#cluster-scale').addEventListener('submit', (e) => {
      e.preventDefault();
      run('Scaling', 'POST', '/scale', { size: parseInt(e.target.elements.size.value, 10) });
    });
    $('#cluster-upgrade').addEventListener('submit', (e) => {
      e.preventDefault();
      run('Upgrading', 'POST', '/upgrade', { version: e.target.elements.version.value });
    });
    $('#cluster-stop').addEventListener('click', () => run('Stopping', 'POST', '/stop', {}));
    $('#cluster-start').addEventListener('click', () => run('Starting', 'POST', '/start', {}));
    const del = $('#cluster-delete');
    del.elements.confirm.addEventListener('input', () => { $('#cluster-delete-button').disabled = del.elements.confirm.value !== c.name; });
    del.addEventListener('submit', (e) => {
      e.preventDefault();
      if (del.elements.confirm.value !== c.name) return;
      run(`Deleting ${c.name}`, 'DELETE', '', undefined);
    });
    // The API answers the kubeconfig as JSON: the link fetches it with the
    // session and hands the browser the file itself.
    const kc = $('#kubeconfig');
    kc.href = '/api/v1/clusters/' + enc(id) + '/kubeconfig';
    kc.addEventListener('click', async (e) => {
      e.preventDefault();
      try {
        const r = await api('/clusters/' + enc(id) + '/kubeconfig');
        const url = URL.createObjectURL(new Blob([r.kubeconfig], { type: 'application/yaml' }));
        const a = el('a', { href: url, download: `${r.name || c.name}.kubeconfig` });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 60000);
        kc.dataset.downloaded = String(Number(kc.dataset.downloaded || 0) + 1);
      } catch (err) { formError(ops, err); }
    });
    const refresh = throttle(() => (gone ? null : Promise.all([load(), loadEvents(), loadRollouts()])), 2000);
    openStream((m) => {
      if ((m.events || []).some((e) => e.cluster === id) || (m.devices || []).some((d) => d.cluster === id) ||
        (m.rollouts || []).length || m.rollouts_more) refresh();
    });
  }

  // ---- rollouts ---------------------------------------------------------

  // A node's phases in the order it goes through them; failed, skipped and
  // withdrawn end it elsewhere.
  const phaseOrder = ['pending', 'cordoned', 'drained', 'agent', 'waiting', 'done'];
  const phaseHelp = {
    pending: 'not started yet', cordoned: 'cordoned: no new pods are scheduled on its Node',
    drained: "drained: its pods were evicted (PodDisruptionBudgets hold)", agent: "the device's agent runs its operation",
    waiting: 'waiting for its Node to be Ready at the target', done: 'done', failed: 'failed: the rollout stops here',
    skipped: 'skipped: already at the target', withdrawn: 'withdrawn: the rollout was aborted before its agent started',
  };
  const rolloutEnded = (r) => ['succeeded', 'failed', 'aborted'].includes(r.state);
  // rolloutDone is how many nodes are through (done, or already there).
  const rolloutDone = (r) => (r.nodes || []).filter((n) => n.phase === 'done' || n.phase === 'skipped').length;
  function rolloutProgressText(r) {
    const c = r.counts || {};
    const total = (r.nodes || []).length;
    let t = `${rolloutDone(r)} of ${total} done`;
    if (c.failed) t += `, ${c.failed} failed`;
    const busy = ['cordoned', 'drained', 'agent', 'waiting'].reduce((a, p) => a + (c[p] || 0), 0);
    if (busy) t += `, ${busy} underway`;
    return t;
  }
  const rolloutLink = (id) => el('a', { href: '/rollouts/' + enc(id), class: 'mono', text: id });
  const rolloutTarget = (r) => (r.kind === 'remove' ? (r.mode === 'standalone' ? 'to standalone' : 'out of the cluster') : r.target);
  // phaseCell shows a node's phase as a badge (its text is the phase) and
  // a track of the steps it went through.
  function phaseCell(phase) {
    const i = phaseOrder.indexOf(phase);
    const track = el('span', { class: 'track', 'aria-hidden': 'true' }, phaseOrder.slice(1).map((p, k) =>
      el('span', { class: 'dot' + (i > k + 1 || phase === 'done' ? ' past' : i === k + 1 ? ' now' : '') })));
    return el('td', { class: 'phase ph-' + phase }, el('span', { class: 'badge ph-' + phase, title: phaseHelp[phase] || phase, text: phase }),
      i > 0 && phase !== 'done' ? track : null);
  }
  function rolloutRow(r, names, withCluster) {
    const total = (r.nodes || []).length;
    return el('tr', { data: { id: r.id } }, td(rolloutLink(r.id)),
      withCluster ? td(r.cluster ? clusterLink(r.cluster, names.get(r.cluster)) : 'standalone devices') : null,
      td(r.kind), td(rolloutTarget(r)), el('td', { class: 'state' }, stateBadge(r.state)),
      el('td', { class: 'progress' }, el('span', { class: 'ptext', text: rolloutProgressText(r) }),
        meter(rolloutDone(r), total, rolloutProgressText(r), true)),
      td(timeEl(r.created, true)));
  }

  async function rolloutsPage() {
    const form = $('#rollout-filter');
    const tbody = $('#rollouts tbody');
    const names = await clusterNameMap();
    fillSelect(form.elements.cluster, [...names].map(([id, name]) => [id, name]), 1);
    const initial = new URLSearchParams(location.search);
    for (const k of ['cluster', 'state']) if (initial.get(k)) form.elements[k].value = initial.get(k);
    let cursors = [''], idx = 0, next = '', seq = 0;
    const load = async () => {
      const my = ++seq;
      const f = formValues(form);
      const q = new URLSearchParams();
      for (const k of ['cluster', 'state']) if (f[k]) q.set(k, f[k]);
      history.replaceState(null, '', location.pathname + (q.toString() ? '?' + q : ''));
      q.set('limit', '50');
      if (cursors[idx]) q.set('cursor', cursors[idx]);
      const r = await api('/rollouts?' + q);
      if (my !== seq) return;
      next = r.next_cursor || '';
      const list = items(r);
      tbody.replaceChildren(...list.map((ro) => rolloutRow(ro, names, true)));
      if (!list.length) {
        tbody.append(el('tr', null, el('td', { colspan: 7, class: 'muted', text: f.cluster || f.state ? 'No rollouts match.'
          : "No rollouts yet: upgrading a cluster (its page's Upgrade, or ztpd rollout start) starts one." })));
      }
      setPager(idx === 0, !next);
      $('#page-info').textContent = list.length ? `Page ${idx + 1}: rollouts ${idx * 50 + 1}–${idx * 50 + list.length}` : '';
      setStatus('');
      loaded();
    };
    const reload = () => { cursors = ['']; idx = 0; return load().catch(showError); };
    form.addEventListener('submit', (e) => { e.preventDefault(); reload(); });
    for (const k of ['cluster', 'state']) form.elements[k].addEventListener('change', reload);
    $('#page-next').addEventListener('click', () => { if (!next) return; cursors[idx + 1] = next; idx++; load().catch(showError); });
    $('#page-prev').addEventListener('click', () => { if (idx === 0) return; idx--; load().catch(showError); });
    await reload();
    const refetch = throttle(load, 1500);
    openStream((m) => { if ((m.rollouts || []).length || m.rollouts_more) refetch(); }, refetch);
  }

  async function rolloutPage() {
    const id = main.dataset.id;
    let r;
    try { r = await api('/rollouts/' + enc(id)); } catch (e) { showError(e); return; }
    const names = await clusterNameMap();
    // steps: the newest agent.step of each of the rollout's operations.
    const steps = new Map();
    const events = $('#rollout-events');
    const ops = () => new Set((r.nodes || []).map((n) => n.operation).filter(Boolean));
    const devs = () => new Set((r.nodes || []).map((n) => n.device));
    const mine = (e) => {
      const f = e.fields || {};
      return (e.type.startsWith('rollout.') && f.rollout === id) || (e.type === 'agent.step' && ops().has(f.operation));
    };
    // An agent's first report can come in the same update as the phase
    // change that names its operation, before the refetch brings the
    // operation: such steps of the rollout's devices wait here (bounded)
    // until the rollout names their operation.
    let stray = [];
    const noteStep = (e) => {
      const f = e.fields || {};
      if (e.type !== 'agent.step' || !f.operation) return;
      const had = steps.get(f.operation);
      if (!had || had.seq < e.seq) steps.set(f.operation, { seq: e.seq, text: `${f.step} ${f.state}${f.state === 'failed' && f.exit_code ? ' (exit ' + f.exit_code + ')' : ''}` });
    };
    const buttons = { pause: $('#rollout-pause'), resume: $('#rollout-resume'), abort: $('#rollout-abort') };
    const render = () => {
      $('#rollout-title').textContent = `Rollout ${r.id}`;
      document.title = `${r.id} · ztpd`;
      const hooks = Object.entries(r.hooks || {}).map(([k, v]) => `${k}=${v}`).join(', ');
      facts($('#rollout-facts'), [
        ['State', el('span', { class: 'state', id: 'rollout-state' }, stateBadge(r.state))],
        ['Reason', r.reason], ['Cluster', r.cluster ? clusterLink(r.cluster, names.get(r.cluster)) : 'standalone devices'],
        ['Kind', r.kind], ['Target', rolloutTarget(r)], ['At a time', r.max_unavailable],
        ['Drain timeout', r.drain_timeout], ['Step timeout', r.step_timeout], ['Hooks', hooks],
        ['Hook failures', r.continue_on_hook_failure ? 'continue past them' : ''], ['Job', r.job], ['Started by', r.created_by],
        ['Started', timeEl(r.created)], ['Updated', timeEl(r.updated_at)], ['Finished', timeEl(r.finished)], ['ID', r.id],
      ]);
      const total = (r.nodes || []).length;
      $('#rollout-progress').replaceChildren(el('p', { id: 'rollout-progress-text', text: rolloutProgressText(r) }),
        meter(rolloutDone(r), total, rolloutProgressText(r), true));
      const c = r.counts || {};
      const phases = [...phaseOrder, 'failed', 'skipped', 'withdrawn'].filter((p) => c[p]);
      $('#rollout-counts').replaceChildren(...phases.map((p) => el('span', { class: 'stat ph-' + p, data: { phase: p } },
        el('span', { class: 'n', text: String(c[p]) }), el('span', { class: 'l', text: p }))));
      $('#rollout-nodes tbody').replaceChildren(...(r.nodes || []).map((n, i) => {
        const step = n.operation && steps.get(n.operation);
        return el('tr', { class: n.phase === 'failed' ? 'ph-row-failed' : null, data: { device: n.device, phase: n.phase } }, td(String(i + 1), 'num'), td(n.node_name), td(deviceLink(n.device), 'mono'),
          td(n.role), phaseCell(n.phase), td(step ? step.text : '', 'step'),
          n.reason ? el('td', { class: n.phase === 'failed' ? 'reason' : 'note', text: n.reason }) : td(''),
          td(timeEl(n.started, true)), td(timeEl(n.finished, true)));
      }));
      if (!total) $('#rollout-nodes tbody').append(el('tr', null, el('td', { colspan: 9, class: 'muted', text: 'No nodes: the cluster had no members when the rollout started.' })));
      // What an action said holds until the rollout's state moves on.
      const said = $('#action-status');
      if (said && said.dataset.state && said.dataset.state !== r.state) { setStatus('', '', said); delete said.dataset.state; }
      const can = { pause: r.state === 'running', resume: r.state === 'paused', abort: !rolloutEnded(r) };
      for (const [k, b] of Object.entries(buttons)) {
        if (!b) continue;
        b.disabled = !can[k];
        if (can[k]) delete b.dataset.off; else b.dataset.off = '1';
      }
    };
    const addEvent = (e) => {
      noteStep(e);
      if ($(`li[data-seq="${Number(e.seq)}"]`, events)) return;
      const placeholder = $('li.muted', events);
      if (placeholder) placeholder.remove();
      events.prepend(eventItem(e, { clusterNames: names }));
    };
    const loadEvents = async () => {
      const q = r.cluster ? 'cluster=' + enc(r.cluster) : 'type=rollout.progress';
      const evs = items(await api('/events?' + q + '&tail=500')).filter(mine);
      evs.forEach(noteStep);
      events.replaceChildren(...evs.reverse().map((e) => eventItem(e, { clusterNames: names })));
      if (!evs.length) events.append(el('li', { class: 'muted', text: 'No activity recorded for this rollout yet.' }));
    };
    render();
    await loadEvents().catch(showError);
    render();
    loaded();
    const st = $('#action-status');
    const act = async (what) => {
      setStatus(`${what}…`, 'busy', st);
      try {
        r = await api('/rollouts/' + enc(id) + '/' + what, { method: 'POST' });
        render();
        setStatus(`${what === 'abort' ? 'Aborted' : what === 'pause' ? 'Paused' : 'Resumed'}: the rollout is ${r.state}.`, 'ok', st);
        st.dataset.state = r.state;
        loaded();
      } catch (e) { showError(e, st); }
    };
    if (buttons.pause) buttons.pause.addEventListener('click', () => act('pause'));
    if (buttons.resume) buttons.resume.addEventListener('click', () => act('resume'));
    if (buttons.abort) confirmButton('Abort', () => act('abort'), 'danger', buttons.abort);
    const adoptStray = () => {
      const known = ops();
      for (const e of stray) if (known.has(e.fields.operation)) addEvent(e);
      stray = stray.filter((e) => !known.has(e.fields.operation));
    };
    const refetch = throttle(async () => { r = await api('/rollouts/' + enc(id)); adoptStray(); render(); loaded(); }, 1000);
    openStream((m) => {
      let changed = false;
      for (const e of m.events || []) {
        if (mine(e)) { addEvent(e); changed = true; } else if (e.type === 'agent.step' && e.fields && devs().has(e.device)) stray = [...stray, e].slice(-200);
      }
      if ((m.rollouts || []).includes(id) || m.rollouts_more) refetch();
      else if (changed) { render(); loaded(); }
    }, refetch);
  }

  // ---- versions ---------------------------------------------------------

  async function versionsPage() {
    const tbody = $('#versions tbody');
    const form = $('#version-add');
    const jobStatus = $('#job-status');
    const load = async () => {
      const [vs, isos] = await Promise.all([api('/versions'), api('/images?kind=binaries-iso').catch(() => ({ items: [] }))]);
      const bySha = new Map(items(isos).map((i) => [i.sha256, i]));
      tbody.replaceChildren(...items(vs).map((v) => {
        const iso = bySha.get(v.image_id) || null;
        // A stored ISO has a known size and sha256; an ISO at a URL is not
        // downloaded by ztpd (devices fetch it), so only a checksum given
        // with it is known.
        const size = iso ? td(humanSize(iso.size), 'num iso-size') : el('td', { class: 'num iso-size muted', title: 'ztpd does not download an ISO at a URL: devices fetch it' }, 'not stored');
        const sum = v.image_id || v.checksum;
        const row = el('tr', { data: { id: v.id } }, td(v.name), td(v.semver), el('td', { class: 'state' }, stateBadge(v.state)),
          td(v.image_id ? (v.iso_name || (iso && iso.name) || 'stored ISO') : v.iso_url, 'iso'), size,
          sum ? td(hash(sum, true), 'iso-sha256') : el('td', { class: 'iso-sha256 muted', title: 'no checksum was given with the URL' }, 'not given'),
          td(timeEl(v.created, true)));
        if (isAdmin) {
          const enabled = v.state === 'Enabled';
          row.append(el('td', { class: 'actions' },
            el('button', { type: 'button', text: enabled ? 'Disable' : 'Enable', onclick: async () => {
              try { await api('/versions/' + enc(v.id), { method: 'PATCH', body: { state: enabled ? 'Disabled' : 'Enabled' } }); await load(); } catch (e) { showError(e); }
            } }),
            confirmButton('Delete', async () => {
              try {
                const r = await api('/versions/' + enc(v.id), { method: 'DELETE' });
                await followJob(r.job, jobStatus || $('#status'), `Deleting ${v.name}`);
                await load();
              } catch (e) { showError(e); }
            }, 'danger')));
        }
        return row;
      }));
      if (!items(vs).length) tbody.append(el('tr', null, el('td', { colspan: 8, class: 'muted', text: isAdmin ? 'No Kubernetes versions yet: a cluster needs one; add one below.' : 'No Kubernetes versions yet.' })));
      if (form) {
        const sel = form.elements.image;
        const cur = sel.value;
        fillSelect(sel, items(isos).map((i) => [i.sha256, `${i.name} (${humanSize(i.size)}, sha256 ${i.sha256.slice(0, 12)}…)`]));
        if (!sel.options.length) sel.append(el('option', { value: '', disabled: true, selected: true, text: 'no binaries ISO stored: upload one on the Images page' }));
        if (cur) sel.value = cur;
      }
      loaded();
    };
    await load().catch(showError);
    if (!form) return;
    const source = () => form.elements.source.value;
    const showSource = () => {
      for (const n of form.querySelectorAll('.src-url')) n.hidden = source() !== 'url';
      for (const n of form.querySelectorAll('.src-image')) n.hidden = source() !== 'image';
    };
    for (const r of form.elements.source) r.addEventListener('change', showSource);
    showSource();
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      formError(form, null);
      const v = formValues(form);
      const body = { name: v.name, semver: v.semver };
      if (source() === 'url') { body.url = v.url; if (v.checksum) body.checksum = v.checksum.toLowerCase(); } else body.image = v.image;
      if (v.min_cpu) body.min_cpu = parseInt(v.min_cpu, 10);
      if (v.min_memory_mb) body.min_memory_mb = parseInt(v.min_memory_mb, 10);
      try {
        const r = await api('/versions', { method: 'POST', body });
        if (r && r.job) await followJob(r.job, jobStatus, `Adding ${v.name}`);
        else setStatus(`Added ${v.name}`, 'ok', jobStatus);
        form.reset();
        showSource();
        await load();
      } catch (err) { formError(form, err); }
    });
  }

  // ---- images -----------------------------------------------------------

  // uploadImage streams file to the API with progress (XMLHttpRequest is
  // what reports upload progress).
  function uploadImage(file, query, onProgress) {
    return new Promise((resolve, reject) => {
      const x = new XMLHttpRequest();
      x.open('POST', '/api/v1/images?' + query);
      x.setRequestHeader('X-CSRF-Token', csrf);
      x.setRequestHeader('Content-Type', 'application/octet-stream');
      x.setRequestHeader('Accept', 'application/json');
      x.upload.addEventListener('progress', (e) => { if (e.lengthComputable) onProgress(e.loaded, e.total); });
      x.addEventListener('load', () => {
        let d = null;
        try { d = JSON.parse(x.responseText); } catch (e) { d = null; }
        if (x.status >= 200 && x.status < 300) resolve(d);
        else reject(new APIError(x.status, d && d.error && d.error.code, (d && d.error && d.error.message) || `${x.status} ${x.statusText}`));
      });
      x.addEventListener('error', () => reject(new APIError(0, 'network', 'the upload was cut off')));
      x.addEventListener('abort', () => reject(new APIError(0, 'aborted', 'the upload was cancelled')));
      x.send(file);
    });
  }

  async function imagesPage() {
    const tbody = $('#images tbody');
    const form = $('#image-upload');
    const load = async () => {
      const list = items(await api('/images'));
      tbody.replaceChildren(...list.map((i) => {
        const row = el('tr', { data: { id: i.sha256 } }, td(i.name), td(i.kind), td(i.platform), td(i.version),
          td(humanSize(i.size), 'num'), td(hash(i.sha256, true)), td(timeEl(i.created, true)));
        if (isAdmin) {
          row.append(el('td', { class: 'actions' }, confirmButton('Delete', async () => {
            try {
              await api('/images/' + enc(i.sha256), { method: 'DELETE' });
              setStatus(`Deleted ${i.name}`, 'ok');
              await load();
            } catch (e) { showError(e); }
          }, 'danger')));
        }
        return row;
      }));
      if (!list.length) tbody.append(el('tr', null, el('td', { colspan: 8, class: 'muted', text: isAdmin ? 'No images stored: upload SONiC installers and binaries ISOs below.' : 'No images stored.' })));
      loaded();
    };
    await load().catch(showError);
    if (!form) return;
    const file = form.elements.file;
    file.addEventListener('change', () => { if (file.files[0] && !form.elements.name.value) form.elements.name.value = file.files[0].name; });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      formError(form, null);
      const f = file.files[0];
      if (!f) return;
      const v = formValues(form);
      const q = new URLSearchParams({ name: v.name || f.name, kind: v.kind });
      if (v.sha256) q.set('sha256', v.sha256.toLowerCase());
      const bar = $('#upload-progress'), st = $('#upload-status');
      const btn = $('button[type=submit]', form);
      btn.disabled = true;
      $('#upload-sha256').textContent = '';
      $('#upload-done').hidden = true;
      $('#upload-box').hidden = false;
      const started = Date.now();
      try {
        const im = await uploadImage(f, q, (done, total) => {
          bar.value = Math.round((done * 100) / total);
          const secs = (Date.now() - started) / 1000;
          st.textContent = `${humanSize(done)} of ${humanSize(total)}${secs > 1 ? `, ${humanSize(done / secs)}/s` : ''}`;
        });
        bar.value = 100;
        st.textContent = `Uploaded ${im.name}, ${humanSize(im.size)}`;
        $('#upload-sha256').textContent = im.sha256;
        $('#upload-done').hidden = false;
        form.reset();
        await load();
      } catch (err) {
        st.textContent = '';
        formError(form, err);
      } finally { btn.disabled = false; }
    });
  }

  // ---- leases -----------------------------------------------------------

  const macRE = /^[0-9a-f]{2}([:-]?[0-9a-f]{2}){5}$/i;
  const normMAC = (s) => s.replace(/[:-]/g, '').toLowerCase().match(/../g).join(':');

  async function leasesPage() {
    const form = $('#lease-filter');
    const tbody = $('#leases tbody');
    let pools = [];
    try {
      pools = items(await api('/pools'));
      renderPools($('#pools'), pools);
    } catch (e) { $('#pools').replaceChildren(el('p', { class: 'muted', text: e.message })); }
    fillSelect(form.elements.subnet, pools.map((p) => [p.subnet, p.subnet]), 1);
    const initial = new URLSearchParams(location.search);
    for (const k of ['q', 'subnet', 'state']) if (initial.get(k)) form.elements[k].value = initial.get(k);
    let cursors = [''], idx = 0, next = '';
    const row = (l) => el('tr', { data: { ip: l.ip } }, td(l.ip, 'mono'), td(deviceLink(l.mac), 'mono'), td(l.hostname), td(l.subnet),
      el('td', { class: 'state', text: l.state }), td(timeEl(l.start, true)), td(timeEl(l.expiry, true)), td(l.reserved ? 'yes' : ''));
    const show = (list, info) => {
      tbody.replaceChildren(...list.map(row));
      if (!list.length) tbody.append(el('tr', null, el('td', { colspan: 8, class: 'muted', text: 'No leases match.' })));
      $('#page-info').textContent = info;
      setPager(idx === 0 || !!form.elements.q.value.trim(), !next);
      loaded();
    };
    const load = async () => {
      const v = formValues(form);
      const qs = new URLSearchParams();
      if (v.subnet) qs.set('subnet', v.subnet);
      if (v.state) qs.set('state', v.state);
      const shown = new URLSearchParams(qs);
      if (v.q) shown.set('q', v.q);
      history.replaceState(null, '', location.pathname + (shown.toString() ? '?' + shown : ''));
      if (v.q && macRE.test(v.q)) qs.set('mac', normMAC(v.q));
      else if (v.q) {
        // No server-side IP search: scan the pages (leases are ordered by
        // address) and keep the first 200 matches.
        const q = v.q.toLowerCase(), found = [];
        let cursor = '';
        for (let i = 0; i < 50 && found.length < 200; i++) {
          const r = await api('/leases?' + qs + '&limit=1000' + (cursor ? '&cursor=' + enc(cursor) : ''));
          found.push(...items(r).filter((l) => l.ip.includes(q) || l.mac.includes(q) || (l.hostname || '').toLowerCase().includes(q)));
          cursor = r.next_cursor;
          if (!cursor) break;
        }
        next = '';
        show(found.slice(0, 200), `${found.length >= 200 ? 'First 200' : found.length} matching leases`);
        return;
      }
      qs.set('limit', '100');
      if (cursors[idx]) qs.set('cursor', cursors[idx]);
      const r = await api('/leases?' + qs);
      next = r.next_cursor || '';
      const list = items(r);
      show(list, list.length ? `Page ${idx + 1}: leases ${idx * 100 + 1}–${idx * 100 + list.length}` : '');
    };
    const reload = () => { cursors = ['']; idx = 0; return load().catch(showError); };
    form.addEventListener('submit', (e) => { e.preventDefault(); reload(); });
    for (const k of ['subnet', 'state']) form.elements[k].addEventListener('change', reload);
    $('#page-next').addEventListener('click', () => { if (!next) return; cursors[idx + 1] = next; idx++; load().catch(showError); });
    $('#page-prev').addEventListener('click', () => { if (idx === 0) return; idx--; load().catch(showError); });
    await reload();
    const refreshPools = throttle(async () => { pools = items(await api('/pools')); renderPools($('#pools'), pools); }, 5000);
    openStream((m) => { if ((m.events || []).some((e) => e.type && e.type.startsWith('dhcp'))) refreshPools(); });
  }

  // ---- settings ---------------------------------------------------------

  async function settingsPage() {
    const tbody = $('#apikeys tbody');
    const form = $('#apikey-create');
    const load = async () => {
      const keys = items(await api('/apikeys'));
      tbody.replaceChildren(...keys.map((k) => {
        const key = k.api_key || k.apikey || k.key || '';
        return el('tr', { data: { key } }, td(k.name), td(key ? el('code', { text: key }) : ''), td(k.role), td(k.account),
          td(timeEl(k.created, true)), el('td', { class: 'actions' }, k.revoked ? el('span', { class: 'muted', text: 'revoked' }) :
            confirmButton('Revoke', async () => {
              try { await api('/apikeys/' + enc(key), { method: 'DELETE' }); setStatus(`Revoked ${k.name || key}`, 'ok'); await load(); } catch (e) { showError(e); }
            }, 'danger')));
      }));
      loaded();
    };
    const loadConfig = async () => {
      try { $('#config').textContent = JSON.stringify(await api('/settings/config'), null, 2); } catch (e) { $('#config').textContent = e.message; }
    };
    await Promise.all([load().catch(showError), loadConfig()]);
    const box = $('#apikey-created');
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      formError(form, null);
      const v = formValues(form);
      try {
        const k = await api('/apikeys', { method: 'POST', body: { name: v.name, role: v.role, account: v.account } });
        $('#apikey-new-key').textContent = k.api_key || k.apikey || '';
        $('#apikey-secret').textContent = k.secret_key || '';
        $('#apikey-copy-status').textContent = '';
        box.hidden = false;
        form.reset();
        await load();
        $('#apikey-copy').focus();
      } catch (err) { formError(form, err); }
    });
    $('#apikey-copy').addEventListener('click', async () => {
      const s = $('#apikey-secret').textContent;
      let ok = false;
      try { await navigator.clipboard.writeText(s); ok = true; } catch (e) {
        // Not a secure context (plain http): copy through a selection.
        const r = document.createRange();
        r.selectNodeContents($('#apikey-secret'));
        const sel = getSelection();
        sel.removeAllRanges();
        sel.addRange(r);
        try { ok = document.execCommand('copy'); } catch (e2) { ok = false; }
      }
      $('#apikey-copy-status').textContent = ok ? 'Copied.' : 'Select the secret and copy it.';
    });
    $('#apikey-dismiss').addEventListener('click', () => {
      $('#apikey-secret').textContent = '';
      $('#apikey-new-key').textContent = '';
      box.hidden = true;
    });
  }

  // ---- start ------------------------------------------------------------

  const toggle = $('#nav-toggle');
  if (toggle) {
    toggle.addEventListener('click', () => {
      const open = document.body.classList.toggle('nav-open');
      toggle.setAttribute('aria-expanded', String(open));
    });
  }
  // In the narrow layout each row of a table.cards is a card whose cells
  // carry their column's name (data-label, which the stylesheet shows).
  for (const table of document.querySelectorAll('table.cards')) {
    const heads = [...table.querySelectorAll('thead th')].map((th) => th.textContent.trim());
    const body = table.tBodies[0];
    const label = () => {
      for (const tr of body.rows) {
        [...tr.cells].forEach((c, i) => { if (heads[i] && c.dataset.label !== heads[i]) c.dataset.label = heads[i]; });
      }
    };
    new MutationObserver(label).observe(body, { childList: true, subtree: true });
  }
  // The page's forms act through the API once the page has wired them
  // (their own listeners cancel the browser's submit); a form sent before
  // that, its data still loading, must not be sent by the browser as a GET
  // of the page itself, which would reload it and drop the action. The
  // sign-in form and search forms are plain submits and may.
  document.addEventListener('submit', (e) => {
    const f = e.target;
    if (e.defaultPrevented || !f.closest('main') || f.matches('#signin-form, [role=search]')) return;
    e.preventDefault();
    setStatus('The page is still loading: try again in a moment.', 'busy');
  });
  // ---- positions --------------------------------------------------------

  // slotState is what the device records say of a planned slot: empty (no
  // device arrived, no serial expected), expected (a serial is expected and
  // no device arrived), arrived, joined, mismatched (the box there is not
  // the serial the plan expects), or replaced (another box took the place
  // of the slot's earlier one and has not joined yet: it waits for approval
  // or is joining).
  function slotState(p, dev, earlier) {
    if (!dev) return p.serial ? 'expected' : 'empty';
    if (p.serial && dev.serial && dev.serial !== p.serial) return 'mismatched';
    if (dev.state === 'joined') return 'joined';
    return earlier.length ? 'replaced' : 'arrived';
  }

  async function positionsPage() {
    const [plan, devs] = await Promise.all([listAll('/positions'), listAll('/devices')]);
    // The device records naming each position, newest first: the first is
    // the box there now, the others the boxes it replaced.
    const at = new Map();
    for (const d of devs) {
      if (!d.position) continue;
      if (!at.has(d.position)) at.set(d.position, []);
      at.get(d.position).push(d);
    }
    for (const list of at.values()) list.sort((a, b) => String(b.last_seen).localeCompare(String(a.last_seen)));
    const racks = new Map();
    const counts = {};
    for (const p of plan) {
      const r = p.rack || '';
      if (!racks.has(r)) racks.set(r, []);
      racks.get(r).push(p);
    }
    const sections = [...racks.keys()].sort((a, b) => a.localeCompare(b, undefined, { numeric: true })).map((r) => {
      const rows = racks.get(r).map((p) => {
        const [dev, ...earlier] = at.get(p.name) || [];
        const st = slotState(p, dev, earlier);
        counts[st] = (counts[st] || 0) + 1;
        const proof = [p.relay, p.circuit_id, p.remote_id].filter(Boolean).join(' / ');
        const devCell = dev ? el('td', null, el('a', { href: '/devices/' + enc(dev.id), text: dev.serial || dev.mac || dev.id }),
          ...(earlier.length ? [el('span', { class: 'muted replaced', text: ' replaces ' },
            el('a', { href: '/devices/' + enc(earlier[0].id), text: earlier[0].serial || earlier[0].mac || earlier[0].id }))] : []))
          : td('');
        return el('tr', { id: 'pos-' + p.name, data: { state: st } }, td(p.name), td(p.port), td(proof, 'mono'), td(p.address),
          td(p.serial), el('td', { class: 'state' }, el('span', { class: 'badge st-' + st, text: st })),
          devCell,
          td(dev ? dev.ip : ''), td(p.cluster), td(p.source === 'api' ? 'API' : p.source));
      });
      const hid = 'h-rack-' + (r || 'none');
      return el('section', { class: 'card rack', 'aria-labelledby': hid },
        el('h2', { id: hid, text: r ? 'Rack ' + r : 'No rack' }),
        el('div', { class: 'table-wrap' }, el('table', { class: 'data cards' },
          el('thead', null, el('tr', null, ...['Position', 'Port', 'Relay / circuit / remote', 'Address', 'Expected serial', 'State',
            'Device', 'IP', 'Cluster', 'Source'].map((h) => el('th', { scope: 'col', text: h })))),
          el('tbody', null, ...rows))));
    });
    $('#racks').replaceChildren(...sections);
    const order = ['expected', 'arrived', 'joined', 'replaced', 'mismatched', 'empty'];
    $('#positions-summary').textContent = plan.length
      ? `${plan.length} positions in ${racks.size} racks: ` + order.filter((k) => counts[k]).map((k) => `${counts[k]} ${k}`).join(', ')
      : 'No cabling plan: list plan files under positions: in the configuration, or add positions with ztpd position set.';
    loaded();
  }

  const pages = { overview: overviewPage, devices: devicesPage, device: devicePage, clusters: clustersPage, cluster: clusterPage,
    rollouts: rolloutsPage, rollout: rolloutPage, versions: versionsPage, images: imagesPage, leases: leasesPage, positions: positionsPage, settings: settingsPage };
  const run = pages[pageName];
  if (run && csrf) run().catch((e) => showError(e));
  else loaded(); // sign-in and forbidden pages have nothing to fetch
})();
