// tqw web UI: a client of the server's /v1 API, in plain JavaScript.
// Every page is built with DOM calls (textContent, never innerHTML for data),
// so run data cannot become markup; the only markup inserted is the SVG that
// Mermaid renders in its strict security level.
'use strict';
(() => {
  const TOKEN_KEY = 'tqw.apiToken';
  const STATES = ['pending', 'running', 'waiting', 'scheduled', 'cancelling', 'succeeded', 'failed', 'cancelled'];
  const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);
  const PAGE = 50;

  // ---- DOM -----------------------------------------------------------------

  // h builds an element: h('a', {href: '/x', class: 'c', onclick: f}, 'text', child).
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'checked' || k === 'value') el[k] = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }
  const $ = (sel, root) => (root || document).querySelector(sel);
  const main = () => $('#main');

  function stateBadge(state) {
    return h('span', {class: 'state state-' + (STATES.includes(state) ? state : 'unknown'), 'data-state': state}, state || 'unknown');
  }
  function fmtTime(s) {
    if (!s) return '';
    const d = new Date(s);
    return isNaN(d) ? String(s) : d.toLocaleString();
  }
  function timeEl(s) { s = realTime(s); return s ? h('time', {datetime: s, title: s}, fmtTime(s)) : h('span', {class: 'muted'}, '—'); }
  function fmtDuration(ms) {
    if (!(ms >= 0)) return '';
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + ' s';
    const m = Math.floor(s / 60), rs = Math.round(s % 60);
    if (m < 60) return `${m} min ${rs} s`;
    return `${Math.floor(m / 60)} h ${m % 60} min`;
  }
  function between(a, b) {
    a = realTime(a); b = realTime(b);
    if (!a || !b) return '';
    return fmtDuration(new Date(b) - new Date(a));
  }
  // A run that has not ended shows a duration that advances: ticking(ms)
  // is an element showing ms plus the time since it was made, and one
  // timer moves every such element on the page once a second (it stops
  // when none is left). The base comes from the server's clock where it
  // can (wall_seconds), so the browser's clock being off does not show.
  let ticker = null;
  function tick() {
    const els = document.querySelectorAll('[data-ticking]');
    if (!els.length) { clearInterval(ticker); ticker = null; return; }
    const now = performance.now();
    for (const el of els) el.textContent = fmtDuration(Number(el.dataset.baseMs) + now - Number(el.dataset.at));
  }
  function ticking(ms) {
    ms = Math.max(0, ms || 0);
    if (!ticker) ticker = setInterval(tick, 1000);
    return h('span', {'data-ticking': '', 'data-base-ms': String(ms), 'data-at': String(performance.now())}, fmtDuration(ms));
  }
  // took is a run's duration: fixed once it ended, else advancing.
  function took(r, wallSeconds) {
    if (TERMINAL.has(r.state) || realTime(r.ended_at)) return between(r.started_at, r.ended_at);
    if (wallSeconds !== undefined) return ticking(wallSeconds * 1000);
    const start = realTime(r.started_at);
    return start ? ticking(Date.now() - new Date(start)) : '';
  }
  function json(v) { return JSON.stringify(v, null, 2); }
  // realTime is s unless it is absent or Go's zero time (a step still running).
  function realTime(s) { return s && new Date(s).getUTCFullYear() > 1970 ? s : ''; }
  // errorText renders an error the API sends as a string or as {type, message, status}.
  function errorText(e) {
    if (e === null || e === undefined || e === '') return '';
    if (typeof e !== 'object') return String(e);
    const head = [e.type, e.status ? 'HTTP ' + e.status : ''].filter(Boolean).join(', ');
    return (head ? head + ': ' : '') + (e.message || json(e));
  }
  function runURL(id) { return '/ui/runs/' + encodeURIComponent(id); }
  // branchesOf is a run view's parallel branches: [{step, branch, run_id, state, current_step}].
  function branchesOf(r) { return Array.isArray(r.branches) ? r.branches.filter((b) => b && typeof b === 'object' && b.branch) : []; }
  function workflowURL(name) { return '/ui/workflows/' + encodeURIComponent(name); }

  // ---- live indicator --------------------------------------------------------

  let liveStreams = 0;
  function setLive(delta, broken) {
    liveStreams += delta;
    const el = $('#live');
    if (broken) { el.className = 'live off'; el.textContent = 'reconnecting…'; return; }
    el.className = liveStreams > 0 ? 'live on' : 'live';
    el.textContent = liveStreams > 0 ? 'live' : '';
  }

  // ---- API -------------------------------------------------------------------

  class APIError extends Error {
    constructor(status, body, text) {
      const e = body && body.error;
      super((e && e.message) || text || `the server answered HTTP ${status}`);
      this.status = status;
      this.code = e && e.code;
      this.field = e && e.field;
      this.body = body;
    }
  }

  // The token is asked for once per browser session (sessionStorage), when
  // the server first answers 401; all requests waiting on it share one dialog.
  let tokenPrompt = null;
  function askToken(message) {
    if (tokenPrompt) return tokenPrompt;
    tokenPrompt = new Promise((resolve) => {
      const dlg = $('#token-dialog'), form = $('#token-form'), input = $('#token-input'), err = $('#token-error');
      err.textContent = message || '';
      input.value = '';
      input.setAttribute('aria-invalid', message ? 'true' : 'false');
      const onSubmit = (ev) => {
        ev.preventDefault();
        const t = input.value.trim();
        if (!t) { err.textContent = 'Enter the API token (TQW_API_TOKEN of the server).'; input.setAttribute('aria-invalid', 'true'); return; }
        sessionStorage.setItem(TOKEN_KEY, t);
        form.removeEventListener('submit', onSubmit);
        dlg.removeEventListener('cancel', onCancel);
        input.removeEventListener('input', onInput);
        dlg.close();
        tokenPrompt = null;
        resolve();
      };
      // Escape would leave the page without data and without a way back.
      const onCancel = (ev) => ev.preventDefault();
      // An error about an empty or refused token goes once one is typed.
      const onInput = () => { if (input.value.trim()) { err.textContent = ''; input.setAttribute('aria-invalid', 'false'); } };
      form.addEventListener('submit', onSubmit);
      dlg.addEventListener('cancel', onCancel);
      input.addEventListener('input', onInput);
      dlg.showModal();
      input.focus();
    });
    return tokenPrompt;
  }
  function authHeaders(h0) {
    const t = sessionStorage.getItem(TOKEN_KEY);
    if (t) h0.Authorization = 'Bearer ' + t;
    return h0;
  }
  async function refused(res) {
    if (res.status !== 401) return false;
    const had = sessionStorage.getItem(TOKEN_KEY);
    sessionStorage.removeItem(TOKEN_KEY);
    await askToken(had ? 'The server refused that token; enter it again.' : '');
    return true;
  }

  async function call(method, path, body) {
    for (;;) {
      const headers = authHeaders({Accept: 'application/json'});
      let payload;
      if (body !== undefined) {
        headers['Content-Type'] = 'application/json';
        payload = JSON.stringify(body);
      }
      const res = await fetch(path, {method, headers, body: payload, cache: 'no-store', credentials: 'omit'});
      if (await refused(res)) continue;
      const text = await res.text();
      let data = null;
      try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
      if (!res.ok) throw new APIError(res.status, data, data ? '' : text.trim());
      return data;
    }
  }

  // subscribe reads a text/event-stream with fetch (EventSource cannot send
  // an Authorization header) and calls onEvent(type, data) for each event.
  // It reconnects with backoff while again() says so, sending the id of the
  // last event read as Last-Event-ID so the server resends what it missed,
  // and calling onOpen at each connection. A resync event (the server ended
  // a stream that fell behind) reconnects at once. It returns a stop function.
  function subscribe(path, onEvent, {onOpen, again} = {}) {
    const ctl = new AbortController();
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    const last = {id: ''};
    (async () => {
      let backoff = 500;
      while (!ctl.signal.aborted) {
        let open = false, resync = false;
        try {
          const extra = {Accept: 'text/event-stream'};
          if (last.id) extra['Last-Event-ID'] = last.id;
          const res = await fetch(path, {headers: authHeaders(extra), signal: ctl.signal, cache: 'no-store', credentials: 'omit'});
          if (await refused(res)) continue;
          if (!res.ok || !res.body) throw new APIError(res.status, null, '');
          open = true;
          setLive(+1);
          backoff = 500;
          if (onOpen) onOpen();
          const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
          let buf = '';
          for (;;) {
            const {value, done} = await reader.read();
            if (done) break;
            buf += value.replace(/\r/g, '');
            let i;
            while ((i = buf.indexOf('\n\n')) >= 0) {
              if (dispatch(buf.slice(0, i), onEvent, last) === 'resync') resync = true;
              buf = buf.slice(i + 2);
            }
          }
          setLive(-1);
          open = false;
          if (resync) continue;
          if (again && !again()) return;
        } catch (e) {
          if (open) setLive(-1);
          if (ctl.signal.aborted) return;
          setLive(0, true);
        }
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 10000);
      }
    })();
    return () => ctl.abort();
  }
  // dispatch parses one event, records its id in last.id and returns its
  // type; a resync event is the stream's own business, not onEvent's.
  function dispatch(block, onEvent, last) {
    let type = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let value = c < 0 ? '' : line.slice(c + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') type = value;
      else if (field === 'data') data.push(value);
      else if (field === 'id') last.id = value;
    }
    if (!data.length || type === 'resync') return type;
    let parsed;
    try { parsed = JSON.parse(data.join('\n')); } catch (_) { return type; }
    onEvent(type, parsed);
    return type;
  }

  // throttle runs f at most once per ms, trailing: a burst of events costs
  // one reload, the last event always gets one.
  function throttle(f, ms) {
    let timer = null, again = false;
    const run = async () => {
      again = false;
      try { await f(); } finally {
        timer = setTimeout(() => { timer = null; if (again) fire(); }, ms);
      }
    };
    const fire = () => { if (timer) { again = true; return; } timer = true; run(); };
    return fire;
  }

  // ---- router ------------------------------------------------------------------

  let cleanups = [];
  function onLeave(f) { cleanups.push(f); }
  function navigate(url) { history.pushState(null, '', url); route(); }
  function route() {
    for (const f of cleanups) f();
    cleanups = [];
    const p = location.pathname;
    let m, section = 'runs';
    main().replaceChildren();
    if (p === '/ui/' || p === '/ui') runsPage();
    else if ((m = p.match(/^\/ui\/runs\/([^/]+)$/))) runPage(decodeURIComponent(m[1]));
    else if (p === '/ui/workflows') { section = 'workflows'; workflowsPage(); }
    else if ((m = p.match(/^\/ui\/workflows\/([^/]+)$/))) { section = 'workflows'; workflowPage(decodeURIComponent(m[1])); }
    else { section = ''; setTitle('Not found'); main().append(h('h1', {}, 'Not found'), h('p', {}, 'No page here. ', h('a', {href: '/ui/'}, 'See the runs.'))); }
    for (const a of document.querySelectorAll('[data-nav]')) {
      if (a.dataset.nav === section) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
  }
  function setTitle(t) { document.title = t + ' · tqw'; }
  function showError(where, err) {
    where.replaceChildren(h('p', {class: 'alert', role: 'alert'}, err instanceof APIError && err.status === 404 ? 'Not found: ' + err.message : String(err.message || err)));
  }

  document.addEventListener('click', (ev) => {
    const a = ev.target.closest && ev.target.closest('a[href]');
    if (!a || a.target || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || !url.pathname.startsWith('/ui/') || url.pathname.startsWith('/ui/assets/') || url.hash && url.pathname === location.pathname) return;
    ev.preventDefault();
    navigate(url.pathname + url.search);
    main().focus();
  });
  window.addEventListener('popstate', route);

  // ---- workflows: names ----------------------------------------------------------

  // The API lists workflow files by name; runs carry the workflow's own
  // name (the file's `name:`). workflowsIndex maps both ways.
  let workflowsCache = null;
  async function workflowsIndex() {
    if (!workflowsCache) {
      workflowsCache = call('GET', '/v1/workflows').then((d) => (d && d.workflows) || []).catch((e) => { workflowsCache = null; throw e; });
    }
    return workflowsCache;
  }
  const stripExt = (n) => String(n).replace(/(\.tqw)?\.ya?ml$/, '');
  function runWorkflowName(w) { return w.workflow || stripExt(w.name); }
  async function fileForWorkflow(workflow) {
    const list = await workflowsIndex();
    const hit = list.find((w) => w.name === workflow) || list.find((w) => runWorkflowName(w) === workflow);
    return hit ? hit.name : null;
  }

  // ---- graph ---------------------------------------------------------------------

  let mermaidReady = null;
  function loadMermaid() {
    if (!mermaidReady) {
      mermaidReady = new Promise((resolve, reject) => {
        const s = h('script', {src: '/ui/assets/vendor/mermaid.min.js'});
        s.onload = () => {
          window.mermaid.initialize({startOnLoad: false, securityLevel: 'strict', theme: 'neutral', flowchart: {htmlLabels: false}});
          resolve(window.mermaid);
        };
        s.onerror = () => { mermaidReady = null; reject(new Error('the graph renderer did not load')); };
        document.head.append(s);
      });
    }
    return mermaidReady;
  }
  let graphSeq = 0;
  const stepIdOK = (id) => typeof id === 'string' && /^[A-Za-z0-9_-]+$/.test(id);
  // renderGraph draws a workflow's Mermaid flowchart (node ids s_STEP, as
  // `tqw-dsl graph` writes them) into box, marking visited steps and the
  // current one (with a parallel step's, the current step of each branch).
  // It says it is loading (aria-busy, and a message until a first drawing)
  // while the renderer loads and draws.
  async function renderGraph(box, source, current, visited, branchSteps) {
    box.setAttribute('aria-busy', 'true');
    const loading = box.querySelector('svg') ? null : h('p', {class: 'muted', role: 'status', 'data-graph-loading': ''}, 'Loading the graph…');
    if (loading) box.replaceChildren(loading);
    try {
      await drawGraph(box, source, current, visited, branchSteps);
    } catch (e) {
      if (loading) loading.remove();
      throw e;
    } finally {
      box.removeAttribute('aria-busy');
    }
  }
  async function drawGraph(box, source, current, visited, branchSteps) {
    const mermaid = await loadMermaid();
    let src = String(source).trimEnd() + '\n';
    const now = [current, ...(branchSteps || [])].filter(stepIdOK);
    const seen = (visited || []).filter((s) => stepIdOK(s) && !now.includes(s));
    if (seen.length) src += `  class ${seen.map((s) => 's_' + s).join(',')} visited\n`;
    if (now.length) src += `  class ${now.map((s) => 's_' + s).join(',')} current\n`;
    const {svg} = await mermaid.render('tqw-graph-' + (++graphSeq), src);
    box.innerHTML = svg; // Mermaid's strict level sanitizes its output (DOMPurify).
    decodeSVGText(box);
    const el = box.querySelector('svg');
    if (el) {
      // Mermaid sizes the drawing with an inline max-width, which the CSP
      // refuses: give it its natural width as an attribute instead.
      const vb = el.viewBox && el.viewBox.baseVal;
      if (vb && vb.width) { el.setAttribute('width', String(Math.ceil(vb.width))); el.removeAttribute('height'); }
      el.setAttribute('role', 'img');
      const parts = ['Step graph'];
      if (now.length) parts.push((now.length > 1 ? 'current steps ' : 'current step ') + now.join(', '));
      if (seen.length) parts.push('visited ' + seen.join(', '));
      el.setAttribute('aria-label', parts.join('; '));
    }
  }
  // Labels reach Mermaid as its entity codes (#quot;, #lt;, #amp;: `tqw-dsl
  // graph` writes them so), and where Mermaid draws a label as SVG text
  // it leaves the entity in the text: "&quot;" on screen. decodeSVGText
  // turns those into their characters, as text (never markup); labels
  // drawn as HTML (foreignObject) were decoded by the HTML parser.
  const NAMED = {quot: '"', amp: '&', lt: '<', gt: '>', apos: '\''};
  function decodeSVGText(root) {
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (!n.data.includes('&') || n.parentElement.closest('foreignObject')) continue;
      n.data = n.data.replace(/&(?:#(\d{1,7})|#x([0-9a-f]{1,6})|(quot|amp|lt|gt|apos));/gi, (m, dec, hex, name) => {
        if (name) return NAMED[name.toLowerCase()];
        const cp = dec ? Number(dec) : parseInt(hex, 16);
        return cp > 0 && cp <= 0x10ffff ? String.fromCodePoint(cp) : m;
      });
    }
  }
  function legend(current, visited) {
    return h('p', {class: 'legend'},
      h('span', {}, h('span', {class: 'sw current', 'aria-hidden': 'true'}), 'current: ', h('strong', {'data-graph-current': ''}, [].concat(current || []).join(', ') || '—')),
      h('span', {}, h('span', {class: 'sw visited', 'aria-hidden': 'true'}), 'visited: ', h('span', {'data-graph-visited': ''}, (visited || []).join(', ') || '—')));
  }

  // ---- runs list -----------------------------------------------------------------

  function runsPage() {
    setTitle('Runs');
    const params = new URLSearchParams(location.search);
    const f = {status: params.get('status') || '', workflow: params.get('workflow') || '', label: params.get('label') || '', q: params.get('q') || ''};
    const rows = new Map(); // run id -> {run, tr}
    let cursor = null, shown = PAGE;

    const counts = h('ul', {class: 'counts', 'aria-label': 'Runs by state'});
    const status = h('select', {id: 'f-status', name: 'status'}, h('option', {value: ''}, 'any'), STATES.map((s) => h('option', {value: s}, s)));
    const workflow = h('select', {id: 'f-workflow', name: 'workflow'}, h('option', {value: ''}, 'any'));
    const search = h('input', {id: 'f-q', name: 'q', type: 'search', placeholder: 'run id', autocomplete: 'off', spellcheck: 'false'});
    const label = h('input', {id: 'f-label', name: 'label', type: 'search', placeholder: 'key=value', autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'f-label-msg'});
    const labelMsg = h('p', {class: 'field-error', role: 'alert', id: 'f-label-msg'});
    label.value = f.label;
    const searchMsg = h('p', {class: 'field-error', role: 'alert', id: 'f-q-msg'});
    status.value = f.status;
    search.value = f.q;
    const tbody = h('tbody', {id: 'runs-body'});
    const empty = h('p', {class: 'empty', id: 'runs-empty', hidden: true}, 'No runs match.');
    const more = h('button', {type: 'button', class: 'secondary', id: 'runs-more', hidden: true, onclick: () => load(false)}, 'Load more');
    const problem = h('div', {'aria-live': 'polite'});

    const form = h('form', {class: 'filters', role: 'search', onsubmit: (ev) => { ev.preventDefault(); openSearched(); }},
      h('div', {}, h('label', {for: 'f-status'}, 'State'), status),
      h('div', {}, h('label', {for: 'f-workflow'}, 'Workflow'), workflow),
      h('div', {}, h('label', {for: 'f-label'}, 'Label'), label, labelMsg),
      h('div', {}, h('label', {for: 'f-q'}, 'Search by id'), search, searchMsg));
    main().append(h('h1', {}, 'Runs'), counts, form, problem,
      h('table', {'aria-describedby': 'runs-empty'},
        h('thead', {}, h('tr', {}, ['Run', 'Workflow', 'Labels', 'State', 'Step', 'Started', 'Ended', 'Took'].map((t) => h('th', {scope: 'col'}, t)))),
        tbody),
      empty, more);

    const syncURL = () => {
      const p = new URLSearchParams();
      for (const k of ['status', 'workflow', 'label', 'q']) if (f[k]) p.set(k, f[k]);
      history.replaceState(null, '', '/ui/' + (p.toString() ? '?' + p : ''));
    };
    status.addEventListener('change', () => { f.status = status.value; syncURL(); load(true); });
    workflow.addEventListener('change', () => { f.workflow = workflow.value; syncURL(); load(true); });
    // A label filter is key=value (the API's label=k=v); applied on change.
    label.addEventListener('change', () => {
      const v = label.value.trim();
      if (v && !/^[^=]+=/.test(v)) { labelMsg.textContent = 'Write the label as key=value.'; label.setAttribute('aria-invalid', 'true'); return; }
      labelMsg.textContent = ''; label.removeAttribute('aria-invalid');
      f.label = v; syncURL(); load(true);
    });
    // Its error goes as soon as the text is a label again (or empty).
    label.addEventListener('input', () => {
      const v = label.value.trim();
      if (label.getAttribute('aria-invalid') === 'true' && (!v || /^[^=]+=/.test(v))) { labelMsg.textContent = ''; label.removeAttribute('aria-invalid'); }
    });
    search.addEventListener('input', () => { f.q = search.value.trim(); searchMsg.textContent = ''; syncURL(); applySearch(); });

    const knownWorkflows = new Set();
    function addWorkflowOption(name) {
      if (!name || knownWorkflows.has(name)) return;
      knownWorkflows.add(name);
      workflow.append(h('option', {value: name}, name));
      if (f.workflow === name) workflow.value = name;
    }
    if (f.workflow) addWorkflowOption(f.workflow);
    workflowsIndex().then((list) => list.forEach((w) => addWorkflowOption(runWorkflowName(w)))).catch(() => {});

    function matches(run) {
      let byLabel = true;
      if (f.label) {
        const i = f.label.indexOf('=');
        byLabel = !!run.labels && run.labels[f.label.slice(0, i)] === f.label.slice(i + 1);
      }
      return (!f.status || run.state === f.status) && (!f.workflow || run.workflow === f.workflow) && byLabel;
    }
    // A run's labels, each a button that filters the list by it; the
    // workflow label repeats the Workflow column, so it is left out.
    function labelsCell(run) {
      const labels = run.labels && typeof run.labels === 'object' ? run.labels : {};
      const keys = Object.keys(labels).filter((k) => k !== 'workflow').sort();
      return h('td', {}, h('span', {class: 'labels'}, keys.map((k) => {
        const kv = k + '=' + labels[k];
        return h('button', {type: 'button', class: 'label', title: 'Show only runs labelled ' + kv, 'aria-pressed': String(f.label === kv),
          onclick: () => { f.label = kv; label.value = kv; labelMsg.textContent = ''; label.removeAttribute('aria-invalid'); syncURL(); load(true); }},
        h('span', {class: 'k'}, k), '=', labels[k]);
      })));
    }
    function rowFor(run) {
      const tr = h('tr', {'data-run': run.run_id, 'data-state': run.state},
        h('td', {}, h('a', {href: runURL(run.run_id), class: 'mono'}, run.run_id)),
        h('td', {}, run.workflow || ''),
        labelsCell(run),
        h('td', {}, stateBadge(run.state)),
        h('td', {}, run.current_step || ''),
        h('td', {}, timeEl(run.started_at)),
        h('td', {}, timeEl(run.ended_at)),
        h('td', {}, took(run)));
      return tr;
    }
    // seq numbers the live events: a row an event updated after a list
    // request was sent is newer than that request's answer.
    let seq = 0;
    function upsert(run, atTop, at = 0) {
      addWorkflowOption(run.workflow);
      const old = rows.get(run.run_id);
      if (!matches(run)) {
        if (old) { old.tr.remove(); rows.delete(run.run_id); }
        return;
      }
      const tr = rowFor(run);
      if (old) old.tr.replaceWith(tr);
      else if (atTop) tbody.prepend(tr);
      else tbody.append(tr);
      rows.set(run.run_id, {run, tr, at});
    }
    function applySearch() {
      let visible = 0;
      for (const {run, tr} of rows.values()) {
        const hide = f.q && !run.run_id.includes(f.q);
        tr.hidden = !!hide;
        if (!hide) visible++;
      }
      empty.hidden = visible > 0;
    }
    // capped: the server counted only the first runs a filter matched, so
    // each count is a lower bound, shown as "N+".
    function renderCounts(c, capped) {
      const total = STATES.reduce((n, s) => n + (c[s] || 0), 0);
      const shownN = (n) => capped && n > 0 ? `${n}+` : String(n);
      const btn = (label, value, n) => h('li', {}, h('button', {type: 'button', 'aria-pressed': String(f.status === value), 'data-count': value || 'all',
        onclick: () => { f.status = value; status.value = value; syncURL(); load(true); }}, label, h('span', {class: 'n'}, shownN(n))));
      counts.replaceChildren(btn('all', '', total), ...STATES.filter((s) => c[s] || s === f.status).map((s) => btn(s, s, c[s] || 0)));
    }
    async function openSearched() {
      const q = search.value.trim();
      if (!q) return;
      try {
        await call('GET', '/v1/runs/' + encodeURIComponent(q));
        navigate(runURL(q));
      } catch (e) {
        searchMsg.textContent = e.status === 404 ? `No run has the id ${q}; the list shows runs whose id contains it.` : e.message;
      }
    }
    let loading = null;
    async function load(reset) {
      const p = new URLSearchParams();
      if (f.status) p.set('status', f.status);
      if (f.workflow) p.set('workflow', f.workflow);
      if (f.label) p.set('label', f.label);
      p.set('order', 'desc'); // newest first (run ids are ULIDs), paged by the server
      p.set('limit', String(reset ? Math.max(PAGE, shown) : PAGE));
      if (!reset && cursor) p.set('cursor', cursor);
      const mine = loading = call('GET', '/v1/runs?' + p);
      const sent = seq;
      try {
        const d = await mine;
        if (mine !== loading) return; // a newer load replaced this one
        problem.replaceChildren();
        // Rows that events changed while the answer was on its way are
        // newer than it: they stay, on top of (or instead of) its rows.
        const newer = reset ? [...rows.values()].filter((r) => r.at > sent) : [];
        if (reset) { tbody.replaceChildren(); rows.clear(); }
        for (const run of d.runs || []) upsert(run, false);
        for (const r of newer.reverse()) upsert(r.run, true, r.at);
        shown = rows.size;
        cursor = d.next_cursor || null;
        more.hidden = !cursor;
        renderCounts(d.counts || {}, !!d.counts_capped);
        applySearch();
      } catch (e) {
        if (mine === loading) showError(problem, e);
      }
    }
    const refresh = throttle(() => load(true), 1000);
    onLeave(subscribe('/v1/events', (type, run) => {
      if (type !== 'run' || !run || !run.run_id) return;
      upsert(run, true, ++seq);
      applySearch();
      refresh(); // counts and order come from the server
    }, {onOpen: () => load(true), again: () => true}));
  }

  // ---- run page ------------------------------------------------------------------

  function runPage(id) {
    setTitle('Run ' + id);
    const header = h('div', {id: 'run-header'}, h('p', {class: 'muted'}, 'Loading…'));
    const actions = h('div', {class: 'head-actions'});
    const approval = h('section', {id: 'approval', 'aria-live': 'polite'});
    const graphBox = h('div', {class: 'graph', id: 'graph'});
    const graphLegend = h('div');
    const graphMsg = h('p', {class: 'muted'});
    const timeline = h('ol', {class: 'timeline', id: 'timeline'});
    const blocks = h('section', {id: 'blocks', 'aria-labelledby': 'blocks-h', hidden: true});
    main().append(h('h1', {}, 'Run ', h('span', {class: 'mono'}, id)), header, actions, approval,
      h('section', {'aria-labelledby': 'graph-h'}, h('h2', {id: 'graph-h'}, 'Step graph'), graphLegend, graphMsg, graphBox), blocks,
      h('section', {'aria-labelledby': 'tl-h'}, h('h2', {id: 'tl-h'}, 'Timeline'), timeline));

    let run = null, graphKey = '', waitKey = null;
    let left = false;
    onLeave(() => { left = true; });

    async function refresh() {
      let hist;
      try {
        [run, hist] = await Promise.all([call('GET', '/v1/runs/' + encodeURIComponent(id)), call('GET', '/v1/runs/' + encodeURIComponent(id) + '/history')]);
      } catch (e) {
        if (!left) showError(header, e);
        return;
      }
      if (left) return;
      renderHeader(run);
      renderActions(run, (hist && hist.records) || []);
      renderApproval(run);
      renderTimeline((hist && hist.records) || []);
      renderBlocks(run);
      await renderRunGraph(run);
    }

    function renderHeader(r) {
      const t = r.totals || {};
      const req = t.requests || {};
      const reqTotal = ['put', 'get', 'list', 'delete', 'head'].reduce((n, k) => n + (req[k] || 0), 0);
      const row = (k, v, key) => [h('dt', {}, k), h('dd', key ? {'data-field': key} : {}, v)];
      const facts = h('dl', {class: 'facts'},
        row('Workflow', r.workflow ? h('a', {href: '#', 'data-workflow': r.workflow, onclick: (ev) => { ev.preventDefault(); openWorkflow(r.workflow); }}, r.workflow) : '—', 'workflow'),
        row('State', stateBadge(r.state), 'state'),
        row('Current step', r.current_step || '—', 'current_step'),
        row('Definition', r.definition_hash ? h('code', {title: r.definition_hash}, r.definition_hash) : '—', 'definition_hash'),
        row('Started', timeEl(r.started_at)),
        row('Ended', timeEl(r.ended_at)),
        row('Duration', t.wall_seconds !== undefined && TERMINAL.has(r.state) ? fmtDuration(t.wall_seconds * 1000) : took(r, t.wall_seconds), 'duration'),
        row('Steps, attempts', `${t.steps || 0} steps, ${t.attempts || 0} attempts (${t.retries || 0} retries)`, 'attempts'),
        row('LLM', `${t.llm_tokens || 0} tokens, $${(t.llm_cost_usd || 0).toFixed(6)}` +
          (t.llm_saved_tokens ? `; answers reused, saved $${(t.llm_saved_usd || 0).toFixed(6)} / ${t.llm_saved_tokens} tokens` : ''), 'llm'),
        r.forked_from ? row('Forked from', h('span', {}, h('a', {href: runURL(r.forked_from.run_id), class: 'mono'}, r.forked_from.run_id),
          ' at ' + r.forked_from.at), 'forked_from') : null,
        row('Store requests', h('span', {title: `PUT ${req.put || 0}, GET ${req.get || 0}, LIST ${req.list || 0}, DELETE ${req.delete || 0}, HEAD ${req.head || 0}`},
          `${+reqTotal.toFixed(2)} (≈ $${(t.requests_usd_at_s3_list_price || 0).toFixed(8)} at S3 list prices)`), 'requests'));
      // The store keeps a run's input while the run is active (in its
      // step job); the API leaves it out once the run ended.
      const input = r.input === undefined
        ? h('p', {class: 'muted', 'data-field': 'input', 'data-kept': 'false'}, 'No longer kept: the store keeps a run\'s input only while the run is active.')
        : h('pre', {'data-field': 'input'}, json(r.input));
      const parts = [facts, h('details', {open: true}, h('summary', {}, 'Input'), input)];
      if (r.result !== undefined && r.result !== null) parts.push(h('h2', {}, 'Result'), h('pre', {'data-field': 'result'}, json(r.result)));
      if (r.error) parts.push(h('h2', {}, 'Error'), h('pre', {class: 'error', 'data-field': 'error'}, String(r.error)));
      header.replaceChildren(...parts);
      setTitle(`Run ${id} (${r.state})`);
    }

    const actionMsg = h('p', {class: 'alert', role: 'alert'});
    // Cancelling asks to confirm in the page (no window.confirm: it blocks
    // the page and is clumsy with a screen reader); a refresh keeps the question.
    let actionsFor = '';
    function renderActions(r, records) {
      const live = !(TERMINAL.has(r.state) || r.state === 'cancelling');
      if ((live ? 'live' : r.state) === actionsFor) return;
      actionsFor = live ? 'live' : r.state;
      if (!live) { actions.replaceChildren(...recoverActions(id, r, records, actionMsg, refresh)); return; }
      const ask = h('button', {type: 'button', class: 'danger', id: 'cancel', 'aria-expanded': 'false', 'aria-controls': 'cancel-confirm'}, 'Cancel run');
      const yes = h('button', {type: 'button', class: 'danger', id: 'cancel-yes'}, 'Yes, cancel it');
      const no = h('button', {type: 'button', class: 'secondary', id: 'cancel-no'}, 'Keep it running');
      const confirmBox = h('span', {id: 'cancel-confirm', class: 'actions', hidden: true},
        h('span', {}, 'Interrupt the current step and run no further step?'), yes, no);
      ask.addEventListener('click', () => { confirmBox.hidden = false; ask.hidden = true; ask.setAttribute('aria-expanded', 'true'); yes.focus(); });
      no.addEventListener('click', () => { confirmBox.hidden = true; ask.hidden = false; ask.setAttribute('aria-expanded', 'false'); ask.focus(); });
      yes.addEventListener('click', async () => {
        yes.disabled = no.disabled = true;
        actionMsg.textContent = '';
        try {
          await call('POST', '/v1/runs/' + encodeURIComponent(id) + '/cancel');
          await refresh();
        } catch (e) {
          actionMsg.textContent = 'Cancel failed: ' + e.message;
          yes.disabled = no.disabled = false;
        }
      });
      actions.replaceChildren(ask, confirmBox, actionMsg);
    }

    function renderApproval(r) {
      const w = r.state === 'waiting' ? r.waiting : null;
      const key = w ? w.signal_key + '\u0000' + (w.step || '') : null;
      if (key === waitKey) return; // keep what the user is typing
      const was = waitKey;
      waitKey = key;
      if (!w) {
        approval.replaceChildren(was ? h('p', {class: 'notice', role: 'status'}, 'The signal was delivered; the run went on.') : '');
        return;
      }
      approval.replaceChildren(approvalForm(w, refresh));
    }

    function renderTimeline(records) {
      if (!records.length) { timeline.replaceChildren(h('li', {class: 'muted'}, 'No step has run yet.')); return; }
      const forkable = new Set(); // the first record of each step: a fork starts there
      timeline.replaceChildren(...records.map((rec) => {
        const ended = realTime(rec.ended_at);
        const errText = errorText(rec.error);
        const bad = !!errText || /fail|error|dead/i.test(rec.status || '');
        const li = h('li', {class: bad ? 'bad' : (ended ? 'ok' : ''), 'data-step': rec.step, 'data-status': rec.status || ''},
          h('div', {class: 'line'},
            h('span', {class: 'step'}, rec.step),
            h('span', {class: 'muted'}, 'attempt ' + rec.attempt),
            rec.status ? h('span', {class: 'state' + (bad ? ' state-failed' : '')}, rec.status) : null,
            timeEl(rec.started_at),
            ended ? h('span', {'data-duration': ''}, between(rec.started_at, ended)) : h('span', {class: 'muted'}, 'in progress'),
            rec.next ? h('span', {class: 'muted'}, '→ ' + rec.next) : null));
        if (errText) li.append(h('pre', {class: 'error'}, errText));
        if (rec.reused) li.append(h('p', {class: 'muted', 'data-field': 'reused'}, `answer reused, saved $${rec.reused.cost_usd.toFixed(6)} / ${rec.reused.tokens} tokens`));
        if (rec.output !== undefined && rec.output !== null) {
          li.append(h('details', {}, h('summary', {}, 'Output'), h('pre', {}, json(rec.output))));
        }
        if (!forkable.has(rec.step)) { forkable.add(rec.step); li.append(forkButton(rec.step)); }
        return li;
      }));
    }

    // The current step of each branch of the parallel step the run is in.
    function branchSteps(r) {
      if (TERMINAL.has(r.state)) return [];
      return branchesOf(r).filter((b) => !TERMINAL.has(b.state) && b.current_step).map((b) => b.current_step);
    }

    // A parallel step's branches and a map step's items run as child runs:
    // the run view lists the branches (branches, each with its run) and
    // counts the items that ended (map_progress), drawn below the graph.
    let blocksKey = '';
    function renderBlocks(r) {
      const branches = branchesOf(r);
      const m = r.map_progress && typeof r.map_progress === 'object' ? r.map_progress : null;
      const k = JSON.stringify([branches, m]);
      if (k === blocksKey) return;
      blocksKey = k;
      blocks.hidden = !branches.length && !m;
      const parts = [h('h2', {id: 'blocks-h'}, 'Branches and items')];
      const bySteps = new Map();
      for (const b of branches) {
        if (!bySteps.has(b.step)) bySteps.set(b.step, []);
        bySteps.get(b.step).push(b);
      }
      for (const [step, list] of bySteps) {
        parts.push(h('div', {class: 'block', 'data-parallel': step},
          h('h3', {}, 'Parallel step ', h('span', {class: 'mono'}, step)),
          h('ul', {class: 'branches'}, list.map((b) => h('li', {'data-branch': b.branch, 'data-state': b.state || ''},
            h('span', {class: 'step'}, b.branch), stateBadge(b.state),
            b.current_step && !TERMINAL.has(b.state) ? h('span', {class: 'muted'}, 'at ', h('span', {class: 'mono'}, b.current_step)) : null,
            b.run_id ? h('a', {href: runURL(b.run_id), class: 'mono', title: 'The branch\'s child run'}, b.run_id) : null)))));
      }
      if (m) {
        const total = +m.total || 0, done = +m.done || 0, failed = +m.failed || 0;
        const summary = `${done} done, ${failed} failed, of ${total} items`;
        parts.push(h('div', {class: 'block', 'data-map': m.step || ''},
          h('h3', {}, 'Map step ', h('span', {class: 'mono'}, m.step || '')),
          h('div', {class: 'map-progress'},
            h('progress', {max: String(Math.max(total, 1)), value: String(done + failed), 'aria-label': `Items of ${m.step || 'the map'} ended: ${summary}`}),
            h('span', {'data-map-count': '', 'data-done': done, 'data-failed': failed, 'data-total': total},
              h('span', {class: 'ok'}, `${done} done`), ', ', h('span', {class: failed ? 'error' : ''}, `${failed} failed`), `, of ${total} items`))));
      }
      blocks.replaceChildren(...parts);
    }

    // "Fork from here": a new run at this step with the variables and
    // outputs as they were before this run first reached it
    // (POST /v1/runs/{id}/fork); unchanged llm requests reuse the answers.
    function forkButton(step) {
      const msg = h('span', {class: 'alert', role: 'alert'});
      const btn = h('button', {type: 'button', class: 'secondary', 'data-fork': step,
        title: 'Start a new run at this step with the variables and outputs this run had just before it'}, 'Fork from here');
      btn.addEventListener('click', async () => {
        btn.disabled = true;
        msg.textContent = '';
        try {
          const out = await call('POST', '/v1/runs/' + encodeURIComponent(id) + '/fork', {at: step});
          navigate(runURL(out.run_id));
        } catch (e) {
          msg.textContent = 'Fork failed: ' + e.message;
          btn.disabled = false;
        }
      });
      return h('div', {class: 'actions'}, btn, msg);
    }

    async function renderRunGraph(r) {
      const visited = Array.isArray(r.visited_steps) ? r.visited_steps : [];
      const current = TERMINAL.has(r.state) ? '' : (r.current_step || '');
      const inBranches = branchSteps(r);
      const k = [r.definition_hash, r.workflow, current, visited.join(','), inBranches.join(',')].join('|');
      if (k === graphKey) return;
      graphKey = k;
      graphLegend.replaceChildren(legend([current, ...inBranches].filter(Boolean), visited));
      try {
        // The run's pinned definition draws its graph; a server that does
        // not send it has the workflow's file in its folder, maybe.
        let source = r.mermaid;
        if (!source) {
          const file = await fileForWorkflow(r.workflow);
          if (!file) { graphMsg.textContent = `No graph: the server sent none for this run, and its workflows folder has no file for workflow ${r.workflow}.`; return; }
          source = (await call('GET', '/v1/workflows/' + encodeURIComponent(file))).mermaid;
        }
        if (left) return;
        await renderGraph(graphBox, source, current, visited, inBranches);
        graphBox.dataset.current = current;
        graphBox.dataset.visited = visited.join(',');
        graphMsg.textContent = '';
      } catch (e) {
        graphKey = '';
        graphMsg.textContent = 'The graph could not be drawn: ' + e.message;
      }
    }

    async function openWorkflow(name) {
      try {
        const file = await fileForWorkflow(name);
        if (file) { navigate(workflowURL(file)); return; }
        actionMsg.textContent = `The server's workflows folder has no file for workflow ${name}.`;
      } catch (e) { actionMsg.textContent = e.message; }
    }

    const reload = throttle(refresh, 300);
    refresh();
    onLeave(subscribe('/v1/runs/' + encodeURIComponent(id) + '/events', () => reload(),
      {onOpen: () => reload(), again: () => !(run && TERMINAL.has(run.state))}));
  }

  // ---- recovering a run ------------------------------------------------------------

  // recoverActions are the buttons of a failed or cancelled run: Retry
  // (POST /v1/runs/{id}/retry: the step it ended at runs again) and Skip
  // (POST /v1/runs/{id}/skip: that step is recorded as done with the
  // output typed in, JSON). The step is the last one its history shows.
  function recoverActions(id, r, records, msg, done) {
    if (r.state !== 'failed' && r.state !== 'cancelled') return [msg];
    const last = records.length ? records[records.length - 1] : null;
    const step = last && (last.status === 'failed' || last.status === 'waiting' || last.status === 'retry') ? last.step : '';
    const base = '/v1/runs/' + encodeURIComponent(id);
    const busy = (on) => { for (const b of [retry, skip, skipYes]) b.disabled = on; };
    const act = async (what, path, body) => {
      busy(true);
      msg.textContent = '';
      try {
        await call('POST', path, body);
        await done();
      } catch (e) {
        msg.textContent = what + ' failed: ' + e.message;
        busy(false);
      }
    };
    const retry = h('button', {type: 'button', id: 'retry'}, 'Retry run');
    retry.addEventListener('click', () => act('Retry', base + '/retry'));
    const skip = h('button', {type: 'button', class: 'secondary', id: 'skip', 'aria-expanded': 'false', 'aria-controls': 'skip-form', hidden: !step},
      'Skip step ' + step);
    const output = h('textarea', {id: 'skip-output', rows: 3, class: 'mono', spellcheck: 'false', 'aria-describedby': 'skip-hint'}, 'null');
    const skipYes = h('button', {type: 'submit', id: 'skip-yes'}, 'Skip it and continue');
    const form = h('form', {id: 'skip-form', hidden: true, novalidate: true},
      h('label', {for: 'skip-output'}, 'Output of ', h('strong', {}, step), ' (JSON)'),
      h('span', {class: 'hint', id: 'skip-hint'}, 'The step is recorded as done with this output, and the run goes on from it.'),
      output, h('div', {class: 'actions'}, skipYes));
    skip.addEventListener('click', () => {
      form.hidden = !form.hidden;
      skip.setAttribute('aria-expanded', String(!form.hidden));
      if (!form.hidden) output.focus();
    });
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      let value;
      try { value = JSON.parse(output.value.trim() || 'null'); } catch (_) { msg.textContent = 'The output is not valid JSON.'; output.focus(); return; }
      act('Skip', base + '/skip', {step, output: value});
    });
    return [h('span', {class: 'actions'}, retry, skip), form, msg];
  }

  // ---- approval form -----------------------------------------------------------------

  // approvalForm builds a form from the wait's JSON Schema: booleans are
  // switches, enums selects, strings text fields, numbers number fields, and
  // anything else a JSON field. A schema that is not an object of properties
  // gets one JSON field for the whole payload.
  function approvalForm(w, done) {
    const schema = w.schema && typeof w.schema === 'object' ? w.schema : null;
    const props = schema && schema.properties && typeof schema.properties === 'object' ? schema.properties : null;
    const required = new Set(schema && Array.isArray(schema.required) ? schema.required : []);
    const fields = []; // {name, read(): [value, present], input, err}
    const top = h('p', {class: 'alert', role: 'alert', id: 'approval-error'});
    const ok = h('p', {class: 'notice', role: 'status'});
    const form = h('form', {id: 'approval-form', novalidate: true});
    let n = 0;

    function field(name, sub, isRequired) {
      const idf = 'sig-' + (++n);
      const err = h('p', {class: 'field-error', id: idf + '-err'});
      const hint = sub.description ? h('span', {class: 'hint', id: idf + '-hint'}, sub.description) : null;
      const described = [hint && idf + '-hint', idf + '-err'].filter(Boolean).join(' ');
      const labelText = sub.title || name;
      const mark = isRequired ? h('span', {class: 'req', 'aria-hidden': 'true'}, '*') : null;
      let input, read;
      const type = Array.isArray(sub.type) ? sub.type.find((t) => t !== 'null') : sub.type;
      if (Array.isArray(sub.enum)) {
        input = h('select', {id: idf, name, 'aria-describedby': described, required: isRequired},
          isRequired ? h('option', {value: ''}, 'choose…') : h('option', {value: ''}, '(none)'),
          sub.enum.map((v, i) => h('option', {value: String(i)}, typeof v === 'string' ? v : JSON.stringify(v))));
        if (sub.default !== undefined) { const i = sub.enum.findIndex((v) => JSON.stringify(v) === JSON.stringify(sub.default)); if (i >= 0) input.value = String(i); }
        read = () => input.value === '' ? [undefined, false] : [sub.enum[+input.value], true];
        fields.push({name, input, err, read});
        return h('div', {class: 'field'}, h('label', {for: idf}, labelText, mark), hint, input, err);
      }
      if (type === 'boolean') {
        const value = h('span', {class: 'value', 'aria-hidden': 'true'});
        input = h('input', {id: idf, name, type: 'checkbox', role: 'switch', 'aria-describedby': described, checked: sub.default === true});
        const show = () => { value.textContent = input.checked ? 'yes' : 'no'; input.setAttribute('aria-checked', String(input.checked)); };
        input.addEventListener('change', show);
        show();
        read = () => [input.checked, true];
        fields.push({name, input, err, read});
        return h('div', {class: 'field'}, h('label', {class: 'switch', for: idf}, input, h('span', {}, labelText), value), hint, err);
      }
      if (type === 'number' || type === 'integer') {
        input = h('input', {id: idf, name, type: 'number', inputmode: type === 'integer' ? 'numeric' : 'decimal', 'aria-describedby': described, required: isRequired,
          step: type === 'integer' ? '1' : 'any', min: sub.minimum, max: sub.maximum, value: sub.default !== undefined ? String(sub.default) : undefined});
        read = () => {
          const s = input.value.trim();
          if (s === '') return [undefined, false];
          const v = Number(s);
          if (!Number.isFinite(v)) throw new FieldError('Enter a number.');
          if (type === 'integer' && !Number.isInteger(v)) throw new FieldError('Enter a whole number.');
          return [v, true];
        };
      } else if (type === 'string') {
        const long = (sub.maxLength || 0) > 200 || sub.format === 'textarea';
        input = h(long ? 'textarea' : 'input', {id: idf, name, type: long ? undefined : 'text', rows: long ? 4 : undefined, 'aria-describedby': described, required: isRequired,
          minlength: sub.minLength, maxlength: sub.maxLength, pattern: sub.pattern, value: typeof sub.default === 'string' ? sub.default : undefined});
        read = () => input.value === '' && !isRequired ? [undefined, false] : [input.value, true];
      } else {
        input = h('textarea', {id: idf, name, rows: 4, class: 'mono', 'aria-describedby': described, required: isRequired, spellcheck: 'false',
          value: sub.default !== undefined ? json(sub.default) : undefined});
        read = () => {
          const s = input.value.trim();
          if (s === '') return [undefined, false];
          try { return [JSON.parse(s), true]; } catch (_) { throw new FieldError('Enter valid JSON.'); }
        };
      }
      fields.push({name, input, err, read});
      return h('div', {class: 'field'}, h('label', {for: idf}, labelText, mark), hint, input, err);
    }

    const intro = h('p', {}, 'Step ', h('strong', {}, w.step || '?'), ' waits for the signal ', h('code', {}, w.signal_key), '.');
    if (props) {
      // x-order is the order the workflow declares the properties in (a
      // JSON object's keys have none); names it lacks follow.
      const declared = Array.isArray(schema['x-order']) ? schema['x-order'].filter((k) => Object.hasOwn(props, k)) : [];
      const names = [...new Set([...declared, ...Object.keys(props)])];
      for (const name of names) { const sub = props[name]; form.append(field(name, sub && typeof sub === 'object' ? sub : {}, required.has(name))); }
    } else {
      form.append(field('', {title: 'Payload (JSON)', description: schema ? 'The payload must match the step\'s schema.' : 'Any JSON value.'}, false));
    }
    const submit = h('button', {type: 'submit'}, 'Send signal');
    form.append(top, h('div', {class: 'actions'}, submit));

    function clearErrors() {
      top.textContent = '';
      for (const f of fields) { f.err.textContent = ''; f.input.removeAttribute('aria-invalid'); }
    }
    // checked is f's value and whether it is present, or a FieldError
    // saying what is wrong with it, as far as the browser can tell.
    function checked(f) {
      if (!f.input.checkValidity()) throw new FieldError(f.input.validationMessage || 'This value is not valid.');
      const [v, present] = f.read();
      if (props && !present && required.has(f.name)) throw new FieldError('This field is required.');
      return [v, present];
    }
    // A field's error goes as soon as its value is fixed: a field shown
    // invalid is checked again as it changes (a refusal of the server's
    // was about the value it got, so it goes too, unless the browser
    // sees a fault of its own).
    for (const f of fields) {
      const recheck = () => {
        if (f.input.getAttribute('aria-invalid') !== 'true') return;
        try {
          checked(f);
          f.err.textContent = '';
          f.input.removeAttribute('aria-invalid');
        } catch (e) {
          if (!(e instanceof FieldError)) throw e;
          f.err.textContent = e.message;
        }
      };
      f.input.addEventListener('input', recheck);
      f.input.addEventListener('change', recheck);
    }
    function fieldError(name, msg) {
      const f = fields.find((x) => x.name === name);
      if (!f) return false;
      f.err.textContent = msg;
      f.input.setAttribute('aria-invalid', 'true');
      return true;
    }
    // The server names the field as a JSON pointer (/by), a path (by, $.by) or
    // not at all; match the first segment to a form field.
    function fieldOf(path) {
      if (typeof path !== 'string') return null;
      const seg = path.replace(/^\$?[./]?/, '').split(/[./[\]]/)[0];
      return fields.some((f) => f.name === seg) ? seg : null;
    }

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors();
      ok.textContent = '';
      let payload = props ? {} : null, bad = null;
      for (const f of fields) {
        try {
          const [v, present] = checked(f);
          if (!props) { payload = present ? v : null; continue; }
          if (present) payload[f.name] = v;
        } catch (e) {
          if (!(e instanceof FieldError)) throw e;
          fieldError(f.name, e.message);
          bad = bad || f.input;
        }
      }
      if (bad) { bad.focus(); return; }
      submit.disabled = true;
      try {
        const res = await call('POST', '/v1/signals/' + encodeURIComponent(w.signal_key) + '?require_waiting=true', payload);
        ok.textContent = res && res.delivered === 'buffered' ? 'Signal accepted; the run takes it when it gets to the wait.' : 'Signal delivered.';
        await done();
      } catch (e) {
        const where = e instanceof APIError ? fieldOf(e.field) : null;
        const details = e.body && e.body.error && Array.isArray(e.body.error.details) ? e.body.error.details : [];
        let placed = where ? fieldError(where, e.message) : false;
        for (const d of details) {
          const f = fieldOf(d && (d.field || d.path));
          if (f && fieldError(f, d.message || String(d))) placed = true;
        }
        if (e.status === 422) {
          // The schema check names the property: "at '/score': ..." or
          // "missing property 'score'"; the part after "schema: " is the reason.
          const reason = e.message.replace(/^.*does not match the schema: /, '');
          const named = [...e.message.matchAll(/at '\/([^'/]+)|property '([^']+)'/g)].map((m) => m[1] || m[2]);
          for (const name of named) if (fieldError(name, reason)) placed = true;
        }
        top.textContent = placed ? '' : (e.status === 422 ? 'The server refused the payload: ' : 'The signal was not sent: ') + e.message;
        const first = fields.find((f) => f.input.getAttribute('aria-invalid') === 'true');
        (first ? first.input : submit).focus();
      } finally {
        submit.disabled = false;
      }
    });

    return h('div', {class: 'panel approval', 'aria-labelledby': 'approval-h'}, h('h2', {id: 'approval-h'}, 'Approval'), intro, form, ok);
  }
  class FieldError extends Error {}

  // ---- workflows -------------------------------------------------------------------

  async function workflowsPage() {
    setTitle('Workflows');
    const list = h('ul', {class: 'cards', id: 'workflows'});
    main().append(h('h1', {}, 'Workflows'), h('p', {class: 'muted'}, 'The workflow files in the server\'s workflows folder.'), list);
    try {
      workflowsCache = null;
      const ws = await workflowsIndex();
      if (!ws.length) { list.replaceWith(h('p', {class: 'empty'}, 'The server knows no workflow files (start it with --workflows DIR).')); return; }
      list.replaceChildren(...ws.map((w) => h('li', {'data-workflow': w.name},
        h('h2', {}, h('a', {href: workflowURL(w.name)}, w.name)),
        w.workflow ? h('p', {class: 'muted', 'data-declared': w.workflow}, 'workflow ', h('code', {}, w.workflow)) : null,
        w.description ? h('p', {}, w.description) : null,
        h('p', {class: 'muted'}, `${w.steps || 0} steps`))));
    } catch (e) { showError(list, e); }
  }

  async function workflowPage(name) {
    setTitle(name);
    const box = h('div', {class: 'graph', id: 'graph'});
    const msg = h('div', {'aria-live': 'polite'});
    const desc = h('p', {class: 'muted'});
    const recent = h('tbody', {id: 'recent-body'});
    const src = h('pre', {class: 'mono'});
    main().append(h('h1', {}, name), desc, msg,
      h('section', {'aria-labelledby': 'g-h'}, h('h2', {id: 'g-h'}, 'Step graph'), box),
      h('section', {'aria-labelledby': 'r-h'}, h('h2', {id: 'r-h'}, 'Recent runs'),
        h('table', {}, h('thead', {}, h('tr', {}, ['Run', 'State', 'Step', 'Started', 'Took'].map((t) => h('th', {scope: 'col'}, t)))), recent)),
      h('section', {'aria-labelledby': 'y-h'}, h('details', {}, h('summary', {id: 'y-h'}, 'YAML'), src)));
    let wf;
    try {
      wf = await call('GET', '/v1/workflows/' + encodeURIComponent(name));
    } catch (e) { showError(msg, e); return; }
    src.textContent = wf.yaml || '';
    const entry = (await workflowsIndex().catch(() => [])).find((w) => w.name === name) || {name};
    desc.textContent = wf.description || entry.description || '';
    renderGraph(box, wf.mermaid, '', []).catch((e) => { box.replaceChildren(h('p', {class: 'alert'}, 'The graph could not be drawn: ' + e.message)); });
    try {
      const d = await call('GET', '/v1/runs?order=desc&limit=20&workflow=' + encodeURIComponent(wf.title || runWorkflowName(entry)));
      const runs = d.runs || [];
      if (!runs.length) recent.append(h('tr', {}, h('td', {colspan: 5, class: 'muted'}, 'No runs of this workflow.')));
      for (const r of runs) {
        recent.append(h('tr', {'data-run': r.run_id}, h('td', {}, h('a', {href: runURL(r.run_id), class: 'mono'}, r.run_id)),
          h('td', {}, stateBadge(r.state)), h('td', {}, r.current_step || ''), h('td', {}, timeEl(r.started_at)), h('td', {}, took(r))));
      }
    } catch (e) { showError(msg, e); }
  }

  route();
})();
