// The dashboard's cold load and the SQL editor's 50,000-row result, in headless Debian Chromium through
// playwright-core. BenchmarkDashboardColdLoad (bench/coldload_test.go) serves a real appliance with an
// active project and runs this script; it prints lines for people and one "result {json}" line at the end.
//
// A cold load: a new browser context (an empty HTTP cache, no open connection, no compiled code) with only
// the session cookie, then navigation to /projects/{id}. The clock is the page's own (performance.now(),
// from the navigation's start) and stops when the Connect card shows a connection string (a
// MutationObserver installed before any of the page's scripts runs). Each run is made unthrottled or with
// the CPU slowed down 4x and the network emulated (150 ms latency, 200,000 bytes/s down and up).
import { chromium } from 'playwright-core'

const base = process.env.BASE_URL
const projectID = process.env.PROJECT_ID
const runs = Number(process.env.RUNS || 7)
const sqlRuns = Number(process.env.SQL_RUNS || 3)
const modes = (process.env.MODES || 'local,throttled').split(',')

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
    '--no-first-run', '--disable-component-update', '--disable-sync'],
})

// The session: signed in once through the API; every run's context starts with that cookie only.
const signin = await browser.newContext({ ignoreHTTPSErrors: true })
const res = await signin.request.post(base + '/v1/auth/sessions', {
  data: { email: process.env.EMAIL, password: process.env.PASSWORD, cookie: true },
  headers: { 'X-Appliance-CSRF': '1' },
})
if (!res.ok()) throw new Error('sign in: ' + res.status() + ' ' + (await res.text()))
const storageState = await signin.storageState()
await signin.close()

// seen runs in the page before its scripts: it records when a connection string is first in the Connect
// card (its field's value), at the start of the frame that paints it.
function seen() {
  const look = () => {
    const f = document.querySelector('section.connect input')
    if (f && /^postgres(ql)?:\/\//.test(f.value)) {
      // in the document now; shown in the frame that follows
      requestAnimationFrame(() => { window.__connShown = performance.now() })
      return true
    }
    return false
  }
  new MutationObserver((_, obs) => look() && obs.disconnect()).observe(document, { childList: true, subtree: true, characterData: true })
}

const throttle = async (page, on) => {
  if (!on) return
  const cdp = await page.context().newCDPSession(page)
  await cdp.send('Network.enable')
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 150, downloadThroughput: 200000, uploadThroughput: 200000 })
  await cdp.send('Emulation.setCPUThrottlingRate', { rate: 4 })
}

// depth is the longest chain of API calls made strictly one after the other (each sent after the previous
// one's answer was complete) that ends in the call at i; before are the calls that count.
function chain(calls, i) {
  const memo = new Map()
  const d = (j) => {
    if (memo.has(j)) return memo.get(j)
    let best = [calls[j]]
    for (let k = 0; k < calls.length; k++) {
      if (k !== j && calls[k].end <= calls[j].start) {
        const c = d(k)
        if (c.length + 1 > best.length) best = [...c, calls[j]]
      }
    }
    memo.set(j, best)
    return best
  }
  return d(i)
}

async function coldLoad(throttled, trace) {
  const ctx = await browser.newContext({ ignoreHTTPSErrors: true, storageState, viewport: { width: 1280, height: 800 } })
  await ctx.addInitScript(seen)
  const page = await ctx.newPage()
  await throttle(page, throttled)
  if (trace) await browser.startTracing(page, { path: trace, categories: ['devtools.timeline', 'v8', 'v8.execute', 'blink.user_timing', 'loading', 'disabled-by-default-devtools.timeline', 'disabled-by-default-v8.cpu_profiler'] })
  await page.goto(base + '/projects/' + projectID, { waitUntil: 'commit' })
  await page.waitForFunction(() => window.__connShown !== undefined, null, { timeout: 60000, polling: 50 })
  if (trace) await browser.stopTracing()
  // The page's own resource timings: a call's start is when the page asked for it, its end when the
  // answer was complete (the browser's network events can start a call late on a busy machine).
  const m = await page.evaluate(() => ({
    shown: window.__connShown,
    fcp: performance.getEntriesByName('first-contentful-paint')[0]?.startTime,
    res: performance.getEntriesByType('resource').map((e) => ({ url: e.name, start: e.startTime, end: e.responseEnd, size: e.encodedBodySize, proto: e.nextHopProtocol })),
  }))
  await ctx.close()
  // The bundle: the page's main script (the module the HTML names), loaded.
  const main = m.res.find((r) => /\/assets\/index-[^/]*\.js$/.test(r.url))
  const api = m.res.filter((r) => new URL(r.url).pathname.startsWith('/v1/') && r.end > 0 && r.end <= m.shown)
  const conn = api.findIndex((r) => /\/connections$/.test(new URL(r.url).pathname))
  const path = conn < 0 ? [] : chain(api, conn)
  const after = main ? path.filter((r) => r.start >= main.end) : path
  return {
    ms: m.shown,
    fcp: m.fcp,
    bundleMs: main?.end,
    depth: after.length,
    calls: m.res.filter((r) => new URL(r.url).pathname.startsWith('/v1/')).map((r) => new URL(r.url).pathname.replace(projectID, '{id}') + ` ${Math.round(r.start)}-${Math.round(r.end)}`),
    chain: path.map((r) => new URL(r.url).pathname.replace(projectID, '{id}') + ` ${Math.round(r.start)}-${Math.round(r.end)}`),
    scripts: m.res.filter((r) => r.url.endsWith('.js')).map((s) => `${new URL(s.url).pathname.replace('/assets/', '')} ${s.size} B (${s.proto}) at ${Math.round(s.end)} ms`),
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

const result = {}
for (const mode of modes) {
  const throttled = mode === 'throttled'
  await coldLoad(throttled) // a first load out of the count: the server's own first answers (its caches, the pool)
  const all = []
  for (let i = 0; i < runs; i++) {
    // TRACE_DIR: a DevTools trace of each mode's first counted run (open it in the Performance panel)
    const r = await coldLoad(throttled, i === 0 && process.env.TRACE_DIR ? `${process.env.TRACE_DIR}/${mode}.json` : undefined)
    all.push(r)
    console.log(`${mode} run ${i + 1}: connection string shown at ${Math.round(r.ms)} ms (first paint ${Math.round(r.fcp ?? -1)} ms, main script loaded at ${Math.round(r.bundleMs ?? -1)} ms); API calls one after the other after the bundle: ${r.depth}`)
    if (i === 0) console.log(`  chain: ${r.chain.join(' -> ')}\n  API calls: ${r.calls.join(', ')}\n  scripts: ${r.scripts.join('; ')}`)
  }
  result[mode] = {
    median_ms: median(all.map((r) => r.ms)),
    runs_ms: all.map((r) => Math.round(r.ms)),
    median_bundle_ms: median(all.map((r) => r.bundleMs ?? 0)),
    median_fcp_ms: median(all.map((r) => r.fcp ?? 0)),
    depth: Math.max(...all.map((r) => r.depth)),
  }
  console.log(`${mode}: median ${Math.round(result[mode].median_ms)} ms over ${runs} runs (${result[mode].runs_ms.join(', ')}); chain depth after the bundle ${result[mode].depth}`)
}

// The SQL editor opening a 50,000-row result: the longest task the page runs from Run to the result shown
// and scrolled to its last row (PerformanceObserver 'longtask'), unthrottled; then once more with the CPU
// slowed down 4x (the network as is: 4.6 MB of JSON would take 23 s at 1.6 Mbit/s), for information.
async function sqlRun(cpu4x) {
  const ctx = await browser.newContext({ ignoreHTTPSErrors: true, storageState, viewport: { width: 1280, height: 800 } })
  const page = await ctx.newPage()
  await page.goto(base + '/projects/' + projectID + '/sql')
  const editor = page.getByRole('textbox', { name: 'Query' })
  await editor.waitFor()
  await editor.click()
  await page.keyboard.press('Control+a')
  await page.keyboard.press('Backspace')
  await page.keyboard.insertText('SELECT g AS id, md5(g::text) AS hash, now() AS at FROM generate_series(1, 50000) g')
  await page.keyboard.press('Escape')
  if (cpu4x) await (await ctx.newCDPSession(page)).send('Emulation.setCPUThrottlingRate', { rate: 4 })
  await page.evaluate(() => {
    window.__longTasks = []
    new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__longTasks.push(e.duration) }).observe({ type: 'longtask' })
  })
  const t0 = Date.now()
  await page.getByRole('button', { name: 'Run', exact: true }).click()
  const region = page.getByRole('region', { name: 'Statement 1 of 1' })
  await region.getByText('50000 rows', { exact: true }).waitFor({ timeout: 120000 })
  const shown = Date.now() - t0
  const grid = region.getByRole('region', { name: 'Result of statement 1' })
  await grid.getByRole('cell', { name: '1', exact: true }).waitFor()
  for (let k = 1; k <= 10; k++) await grid.evaluate((g, f) => { g.scrollTop = g.scrollHeight * f }, k / 10)
  await grid.getByRole('cell', { name: '50000', exact: true }).waitFor()
  const tasks = await page.evaluate(() => window.__longTasks)
  await ctx.close()
  return { shown, tasks, max: Math.round(Math.max(0, ...tasks)) }
}
if (sqlRuns > 0) {
  const longest = []
  for (let i = 0; i < sqlRuns; i++) {
    const r = await sqlRun(false)
    longest.push(r.max)
    console.log(`sql run ${i + 1}: 50,000 rows shown ${r.shown} ms after Run; ${r.tasks.length} long tasks, the longest ${r.max} ms (${r.tasks.map(Math.round).join(', ')})`)
  }
  const slow = await sqlRun(true)
  console.log(`sql at 4x CPU: 50,000 rows shown ${slow.shown} ms after Run; ${slow.tasks.length} long tasks, the longest ${slow.max} ms (${slow.tasks.map(Math.round).join(', ')})`)
  result.sql = { median_longest_ms: median(longest), longest_ms: longest, cpu4x_longest_ms: slow.max }
}

await browser.close()
console.log('result ' + JSON.stringify(result))
