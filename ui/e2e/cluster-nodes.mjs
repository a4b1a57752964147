// The Operator area's Nodes view on a cluster of three (issue 35 §6), on its own: the Go test
// TestClusterPlacement (acceptance/cluster_place_e2e_test.go) forms the cluster, places projects on its nodes and
// runs this script with BASE_URL (node 1's API), EMAIL and PASSWORD (a platform operator), OUT_DIR and
// NODES (a JSON array of {id, projects}: each node's id and the ids of the projects it hosts, as
// `appliance cluster nodes` lists them). It signs in, opens Operator → Nodes, and checks the cluster's
// summary (quorum, three members, a leader named by its node id) and one row per node: alive, its project
// count and first project ids, its capacity meters, exactly one leader among them; runs axe-core (serious
// and critical violations fail); then shoots it at desktop and phone width (on a phone: the capacity as a
// line of figures under the node). Prints "done" at the end, or "error …" lines and exits 1.
import { chromium } from 'playwright-core'
import { mkdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')
const base = process.env.BASE_URL
const out = process.env.OUT_DIR
const nodes = JSON.parse(process.env.NODES)
mkdirSync(out, { recursive: true })

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
    '--no-first-run', '--disable-component-update', '--disable-sync'],
})
const widths = { desktop: { width: 1280, height: 800 }, phone: { width: 390, height: 844 } }
const ctx = await browser.newContext({ ignoreHTTPSErrors: true, viewport: widths.desktop })
const page = await ctx.newPage()
const consoleErrors = []
page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()))
page.on('pageerror', (e) => consoleErrors.push(String(e)))
const fail = (msg) => { throw new Error(msg) }

try {
  await page.goto(base + '/operator/nodes')
  await page.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
  await page.getByLabel('Email').fill(process.env.EMAIL)
  await page.getByLabel('Password').fill(process.env.PASSWORD)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Nodes', exact: true }).waitFor()
  consoleErrors.length = 0 // the signed-out page's requests were refused (401) before the sign-in
  await page.getByRole('heading', { name: 'Cluster', exact: true }).waitFor()
  const summary = page.locator('section').filter({ has: page.getByRole('heading', { name: 'Cluster', exact: true }) })
  await summary.getByText('quorum', { exact: true }).waitFor()
  await summary.getByText('3 members').waitFor()
  const leaderID = await summary.locator('code').first().innerText()
  if (!nodes.some((n) => n.id === leaderID)) fail(`the summary's leader ${leaderID} is none of the nodes`)

  for (const n of nodes) {
    const row = page.getByRole('row').filter({ has: page.locator('code', { hasText: n.id }) })
    await row.waitFor()
    await row.getByText('alive', { exact: true }).waitFor()
    for (const m of ['Memory', 'Disk', 'Ports']) await row.getByRole('meter', { name: m }).waitFor()
    const cell = row.locator('td').nth(3)
    const projects = Number((await cell.innerText()).split('\n')[0])
    if (projects !== n.projects.length) fail(`node ${n.id}: ${projects} projects in the Nodes view, ${n.projects.length} in cluster nodes`)
    for (const p of n.projects.slice(0, 3)) await cell.getByText(p, { exact: true }).waitFor() // the first ids are listed
  }
  const rows = await page.getByRole('row').count()
  if (rows !== nodes.length + 1) fail(`${rows - 1} node rows, want ${nodes.length}`)
  const leaders = await page.getByRole('cell').getByText('leader', { exact: true }).count()
  if (leaders !== 1) fail(`${leaders} nodes marked leader, want 1`)

  const found = await page.evaluate(async (src) => {
    if (!window.axe) (0, eval)(src)
    const r = await window.axe.run(document, { resultTypes: ['violations'] })
    return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.help}`)
  }, axeSource)
  for (const v of found) fail('accessibility: ' + v)
  for (const [w, size] of Object.entries(widths)) {
    await page.setViewportSize(size)
    // On a phone the project counts move under the state (the Projects column is hidden).
    if (w === 'phone') {
      await page.getByText(/^\S+ · \d+ projects?$/).first().waitFor()
      await page.getByText(/^memory .* of .* · disk .* of .* · ports \d+ of \d+$/).first().waitFor()
      const wide = await page.evaluate(() => document.querySelector('.nodes-table').scrollWidth > document.querySelector('.nodes-table').clientWidth)
      if (wide) fail('on a phone the nodes table is wider than the screen')
    }
    await page.screenshot({ path: `${out}/operator-nodes-cluster-${w}.png`, fullPage: true })
  }
  if (consoleErrors.length) fail('console errors: ' + consoleErrors.join(' | '))
  console.log('done')
} catch (e) {
  console.log('error ' + String(e.stack || e).replaceAll('\n', ' | '))
  process.exitCode = 1
} finally {
  await browser.close()
}
