// The dashboard end to end in headless Chromium (Debian's, driven by playwright-core). The Go test
// TestDashboardEndToEnd (cmd/dashboard_e2e_test.go) serves a real appliance, runs this script, and
// answers its requests on stdin/stdout: the script prints "need <what> <arg>" lines and waits for
// "ok <value>" on stdin, so the Go side can act outside the browser (run select 1, start a CLI login,
// make a job fail) in between.
import { chromium } from 'playwright-core'
import { createInterface } from 'node:readline'
import { mkdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { run as consb } from './consb.mjs'

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

const base = process.env.BASE_URL
const out = process.env.OUT_DIR
mkdirSync(out, { recursive: true })
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]()
async function ask(what, arg = '') {
  console.log(`need ${what} ${arg}`)
  const { value } = await lines.next()
  if (!value || !value.startsWith('ok')) throw new Error(`${what}: ${value}`)
  return value.slice(3)
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
    '--no-first-run', '--disable-component-update', '--disable-sync'],
})
const widths = { desktop: { width: 1280, height: 800 }, phone: { width: 390, height: 844 } }
const ctx = await browser.newContext({ ignoreHTTPSErrors: true, viewport: widths.desktop })
const page = await ctx.newPage()
page.on('dialog', (d) => d.accept()) // the confirmations of revoke and remove
const consoleErrors = []
page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()))
page.on('pageerror', (e) => consoleErrors.push(String(e)))

// Accessibility: axe-core on every page shot; serious and critical violations fail the run. It is
// evaluated through the browser's debugging protocol, which the page's CSP does not govern (the page
// itself still runs under its CSP).
const violations = []
async function axe(name) {
  const found = await page.evaluate(async (src) => {
    if (!window.axe) (0, eval)(src)
    const r = await window.axe.run(document, { resultTypes: ['violations'] })
    return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')})`)
  }, axeSource)
  for (const v of found) violations.push(`${name}: ${v}`)
}

async function shoot(name) {
  await axe(name)
  for (const [w, size] of Object.entries(widths)) {
    await page.setViewportSize(size)
    await page.screenshot({ path: `${out}/${name}-${w}.png`, fullPage: true })
  }
  await page.setViewportSize(widths.desktop)
  if (name === 'project' || name === 'overview' || name === 'project-monitoring') { // dark mode follows the system's
    await page.emulateMedia({ colorScheme: 'dark' })
    await axe(name + ' (dark)')
    await page.screenshot({ path: `${out}/${name}-dark.png`, fullPage: true })
    await page.emulateMedia({ colorScheme: 'light' })
  }
}

try {
  // The API reference reads the served document, signed out.
  await page.goto(base + '/docs')
  await page.getByRole('heading', { name: 'projects', exact: true }).waitFor()
  await page.getByRole('button', { name: /POST \/v1\/projects Create/ }).click()
  await page.getByText('min length 1, max length 63').first().waitFor()
  await shoot('docs')

  // Signed out, a deep link shows the sign-in and comes back to the same page after it.
  await page.goto(base + '/projects')
  await page.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
  await shoot('signin')
  await page.getByLabel('Email').fill(process.env.EMAIL)
  await page.getByLabel('Password').fill('wrong password!')
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('alert').filter({ hasText: 'invalid email or password' }).waitFor()
  // By keyboard alone: the password field, Enter submits.
  await page.getByLabel('Password').focus()
  await page.keyboard.press('Control+A')
  await page.keyboard.type(process.env.PASSWORD)
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Projects' }).waitFor()
  await page.getByText('No projects yet').waitFor()
  // Tab order reaches the main navigation from the top of the page (after the skip link and the brand).
  await page.keyboard.press('Tab')
  await page.keyboard.press('Tab')
  await page.keyboard.press('Tab')
  if ((await page.evaluate(() => document.activeElement?.textContent)) !== 'Overview') throw new Error('the third Tab is not on the navigation')
  await shoot('projects-empty')

  // Create a project and watch it become active.
  await page.getByLabel('Name').fill('e2e shop')
  await page.keyboard.press('Enter') // the form submits from the keyboard
  await page.getByRole('heading', { name: 'e2e shop' }).waitFor()
  await page.locator('.facts .badge-active').first().waitFor({ timeout: 60000 })
  const field = page.getByLabel('Direct connection', { exact: true })
  if (!(await field.inputValue()).includes('••••••@')) throw new Error('the password is shown before "Show"')
  await page.getByRole('button', { name: 'Show Direct connection' }).click()
  const direct = await field.inputValue()
  await ask('select1', direct)
  await page.getByRole('button', { name: 'Copy Direct connection' }).click().catch(() => {})
  const prjID = new URL(page.url()).pathname.split('/').pop()

  // A job that fails shows its error and the tail of its stderr.
  const marker = await ask('failed-job', prjID)
  await page.getByText(marker).first().waitFor({ timeout: 30000 })
  await shoot('project')

  // A backup taken from the page completes and is verified; a restore point, and a restore to it.
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Backups' }).click()
  await page.getByLabel('Label (optional)').fill('from the dashboard')
  await page.getByRole('button', { name: 'Take a backup' }).click()
  const row = page.getByRole('row').filter({ hasText: 'from the dashboard' })
  await row.locator('.badge-verified').waitFor({ timeout: 60000 })
  // Where the backups live (this machine's disk, said plainly), and the WAL archiving once sampled.
  await page.getByText(/Backups live in .*\/backups\/.* on this machine's disk\./).first().waitFor()
  await page.getByText("Losing this machine's disk loses the backups with the database.").first().waitFor()
  await page.getByText('not read yet (the appliance reads it every minute)').waitFor()
  await page.getByLabel('Label', { exact: true }).fill('before the e2e change')
  await page.getByRole('button', { name: 'Create restore point' }).click()
  await page.getByRole('cell', { name: 'before the e2e change', exact: true }).waitFor()
  await page.getByRole('radio', { name: 'a restore point' }).check()
  await page.getByLabel('Restore point', { exact: true }).selectOption({ label: await page.locator('#restore-point option').nth(1).innerText() })
  await page.getByText('after the restore point “before the e2e change” will be lost').waitFor()
  await page.getByLabel(/Type the project name/).fill('e2e shop')
  await page.getByRole('button', { name: 'Restore', exact: true }).click()
  await page.getByRole('status').filter({ hasText: 'Restore' }).locator('.badge-completed').waitFor({ timeout: 90000 })
  await shoot('project-backups')

  // An export, made and offered for download.
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Exports' }).click()
  await page.getByRole('button', { name: 'Export now' }).click()
  await page.getByRole('button', { name: /^Download export/ }).waitFor({ timeout: 60000 })
  await shoot('project-exports')
  // The export, uploaded back through the Imports tab with progress, and restored; a preflight's checklist.
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Imports' }).click()
  await page.getByLabel('Dump file').setInputFiles(await ask('dump-file', prjID))
  await page.getByRole('button', { name: 'Upload', exact: true }).click()
  await page.getByLabel(/Type the project name/).fill('e2e shop')
  await page.getByRole('button', { name: 'Import', exact: true }).click()
  await page.getByRole('status').filter({ hasText: 'Import' }).locator('.badge-completed').waitFor({ timeout: 90000 })
  await page.getByLabel(/Source URL/).fill('postgres://u:p@169.254.169.254:5432/db')
  await page.getByRole('button', { name: 'Check', exact: true }).click()
  await page.getByText('refused by the outbound policy').waitFor()
  await shoot('project-imports')
  // The SQL console: a text of several statements makes 10,000 rows, which the grid scrolls to the end of;
  // an error shows its line with a caret; the history lists both and gives a query back to the editor.
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'SQL' }).click()
  const editor = page.getByLabel(/^Query/)
  await editor.click()
  await page.keyboard.insertText("CREATE TABLE todo (id serial PRIMARY KEY, title text NOT NULL, done boolean DEFAULT false, tags text[]);\n" +
    "INSERT INTO todo (title, tags) SELECT 'task ' || g, ARRAY['e2e'] FROM generate_series(1, 10000) g;\nSELECT * FROM todo ORDER BY id")
  await page.getByRole('button', { name: 'Run', exact: true }).click()
  await page.getByText('10000 rows', { exact: true }).waitFor({ timeout: 30000 })
  const grid = page.getByRole('region', { name: 'Result of statement 3' })
  await grid.getByRole('cell', { name: 'task 1', exact: true }).waitFor()
  if (await grid.getByRole('row').count() > 60) throw new Error('the grid renders every row: ' + await grid.getByRole('row').count())
  await shoot('project-sql')
  await grid.evaluate((el) => { el.scrollTop = el.scrollHeight })
  await grid.getByRole('cell', { name: 'task 10000', exact: true }).waitFor()
  await editor.press('Control+a') // the editor's own keys, then the text inserted (fill restyles inline, which the CSP refuses)
  await editor.press('Backspace')
  await page.keyboard.insertText('SELECT id,\n  nope FROM todo')
  const before = consoleErrors.length
  await editor.press('Control+Enter')
  const sqlError = page.getByRole('alert').filter({ hasText: 'column "nope" does not exist' })
  await sqlError.getByText('SQLSTATE 42703').waitFor()
  if (!(await sqlError.locator('pre.caret').innerText()).endsWith('LINE 2:   nope FROM todo\n          ^')) throw new Error('the caret: ' + await sqlError.locator('pre.caret').innerText())
  // The browser logs the SQL error's 400 answer; that one is expected.
  consoleErrors.splice(before, consoleErrors.length - before, ...consoleErrors.slice(before).filter((e) => !e.includes('status of 400')))
  await page.locator('.history li').filter({ hasText: 'nope FROM todo' }).locator('.badge-failed').waitFor()
  await shoot('project-sql-error')
  await page.locator('.history li').filter({ hasText: 'generate_series' }).getByRole('button', { name: /^Open the query of/ }).click()
  // The new tab renders its text after the click: wait for it rather than read it at once.
  await editor.filter({ hasText: 'generate_series(1, 10000)' }).waitFor({ timeout: 5000 }).catch(() => { throw new Error('the history did not fill the editor') })
  // The table browser: a row edited in place, one inserted, one deleted; the database has the changes.
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Tables' }).click()
  await page.getByLabel('Table', { exact: true }).selectOption('public.todo')
  await page.getByRole('cell', { name: 'task 1', exact: true }).waitFor()
  await page.getByRole('button', { name: 'Edit row 1', exact: true }).click()
  await page.getByLabel('title of row 1', { exact: true }).fill('edited in the grid')
  await page.getByRole('button', { name: 'Save', exact: true }).click()
  await page.getByLabel('title of row 1', { exact: true }).waitFor({ state: 'detached' }) // saved (the cell holding the field is named by its value too)
  await page.getByRole('cell', { name: 'edited in the grid', exact: true }).waitFor()
  await ask('query', direct + " SELECT 1 FROM todo WHERE id = 1 AND title = 'edited in the grid'")
  await page.getByRole('button', { name: 'Insert row' }).click()
  await page.getByLabel(/^title/).fill('inserted from the grid')
  await page.getByLabel(/^tags/).fill('["a", "b,c"]')
  await page.getByRole('button', { name: 'Save new row' }).click()
  await page.getByRole('form', { name: 'New row' }).waitFor({ state: 'detached' })
  await ask('query', direct + " SELECT 1 FROM todo WHERE title = 'inserted from the grid' AND tags = ARRAY['a', 'b,c'] AND done = false")
  await page.getByRole('button', { name: 'Delete row 2', exact: true }).click() // the dialog is accepted
  await page.getByRole('cell', { name: 'task 2', exact: true }).waitFor({ state: 'detached' })
  await ask('query', direct + ' SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM todo WHERE id = 2)')
  await shoot('project-tables')

  // The key-value store: created from its tab, its token shown once and working from a Redis client; a
  // rotation shows a new token and the old one stops working; a flush empties it; a delete removes it.
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Key-value' }).click()
  await page.getByRole('button', { name: 'Create key-value store' }).click()
  await page.getByRole('heading', { name: 'Key-value store created' }).waitFor()
  await page.getByRole('button', { name: 'Show Token' }).click()
  const kvToken = await page.getByLabel('Token', { exact: true }).inputValue()
  if (!/^kv_[0-9a-z]{52}$/.test(kvToken)) throw new Error('the page showed the token ' + kvToken)
  await page.locator('.facts .badge-running').filter({ hasText: 'Ready' }).waitFor({ timeout: 30000 })
  await ask('kv-works', kvToken)
  await shoot('project-kv')
  await page.getByRole('button', { name: 'Done' }).click()
  if ((await page.content()).includes(kvToken)) throw new Error('the token is still on the page after Done')
  await page.getByRole('button', { name: 'Rotate token' }).click()
  await page.getByRole('heading', { name: 'New token' }).waitFor()
  await page.getByRole('button', { name: 'Show Token' }).click()
  const rotated = await page.getByLabel('Token', { exact: true }).inputValue()
  await ask('kv-rotated', kvToken + ' ' + rotated)
  await page.getByRole('button', { name: 'Done' }).click()
  await page.getByRole('button', { name: 'Flush' }).click()
  await ask('kv-empty', rotated)
  await page.getByRole('button', { name: 'Delete store' }).click()
  await page.getByRole('button', { name: 'Create key-value store' }).waitFor({ timeout: 30000 })
  await shoot('project-kv-none')
  // A preview: a clone made from its tab, connected to with its own URL, reset, deleted.
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Previews' }).click()
  await page.getByLabel('Name (optional)').fill('e2e preview')
  await page.getByRole('button', { name: 'Create preview' }).click()
  const previewRow = page.getByRole('row').filter({ hasText: 'e2e preview' })
  await previewRow.locator('.badge-active').waitFor({ timeout: 60000 })
  await page.getByRole('button', { name: 'Connect to e2e preview' }).click()
  await page.getByRole('button', { name: 'Show Preview direct connection' }).click()
  const previewURL = await page.getByLabel('Preview direct connection', { exact: true }).inputValue()
  if (previewURL === direct) throw new Error('the preview has the project\'s URL')
  await ask('select1', previewURL)
  await shoot('project-previews')
  await page.getByRole('button', { name: 'Done' }).click()
  await page.getByRole('button', { name: 'Reset e2e preview' }).click()
  await previewRow.locator('.badge-provisioning').waitFor({ timeout: 20000 }) // not the row as it was before
  await previewRow.locator('.badge-active').waitFor({ timeout: 60000 })
  await ask('write', previewURL + ' CREATE TABLE from_the_preview AS SELECT 1 AS v')
  // Its cutover: requested, rejected with a reason, requested again, approved; the project's own URL then
  // reads the preview's table and the preview is gone.
  const cutoverRows = page.locator('section', { has: page.getByRole('heading', { name: 'Cutover requests' }) }).getByRole('row')
  await page.getByRole('button', { name: 'Request cutover of e2e preview into the project' }).click()
  await cutoverRows.locator('.badge-open').waitFor({ timeout: 20000 })
  await page.getByRole('button', { name: 'Reject the cutover of e2e preview' }).click()
  await page.getByLabel('Reason for rejecting').fill('not before the release')
  await page.getByRole('button', { name: 'Confirm rejection' }).click()
  await cutoverRows.filter({ hasText: 'Rejected: not before the release' }).locator('.badge-rejected').waitFor({ timeout: 20000 })
  await page.getByRole('button', { name: 'Request cutover of e2e preview into the project' }).click()
  await cutoverRows.locator('.badge-open').waitFor({ timeout: 20000 })
  await shoot('project-cutover')
  await page.getByRole('button', { name: 'Approve the cutover of e2e preview' }).click()
  await cutoverRows.locator('.badge-completed').waitFor({ timeout: 120000 })
  await ask('query', direct + ' SELECT v FROM from_the_preview')
  await page.getByText('No previews.').waitFor({ timeout: 60000 })
  await shoot('project-cutover-done')
  // A second preview, empty, deleted from its row.
  await page.getByLabel('Name (optional)').fill('e2e scratch')
  await page.getByLabel('Contents').selectOption('empty')
  await page.getByRole('button', { name: 'Create preview' }).click()
  await page.getByRole('row').filter({ hasText: 'e2e scratch' }).locator('.badge-active').waitFor({ timeout: 60000 })
  await page.getByRole('button', { name: 'Delete e2e scratch' }).click()
  await page.getByText('No previews.').waitFor({ timeout: 60000 })

  // Monitoring: the Go side runs SQL through the API, takes samples and two statement snapshots, raises a
  // storage alert and leaves a statement running; the tab shows them live, charts the history with uPlot,
  // opens a top query's detail, acknowledges the alert, and tails the log as a marker line is written.
  await ask('monitoring', prjID)
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Monitoring' }).click()
  await page.getByRole('heading', { name: 'Now', exact: true }).waitFor()
  await page.getByRole('list', { name: 'Alerts in force' }).getByText(/^storage at \d+% of the limit/).waitFor()
  await page.getByRole('row').filter({ hasText: 'e2e_active' }).getByRole('cell', { name: 'active', exact: true }).waitFor()
  await page.getByRole('meter', { name: 'Storage' }).waitFor()
  const charts = page.locator('.charts .tchart')
  await charts.nth(5).locator('canvas').waitFor()
  if (await charts.locator('canvas').count() !== 6) throw new Error('charts drawn: ' + await charts.locator('canvas').count())
  await page.getByRole('button', { name: '1 h', exact: true }).click()
  await page.locator('.charts .tchart canvas').nth(5).waitFor()
  const top = page.getByRole('region', { name: 'Top queries' })
  await top.getByRole('button', { name: /pg_sleep/ }).first().click()
  const detail = page.getByRole('region', { name: 'Query details' })
  await detail.locator('canvas').waitFor()
  await detail.getByText('pg_sleep', { exact: false }).first().waitFor()
  await page.getByRole('button', { name: 'Acknowledge the storage alert' }).click()
  await page.getByRole('status').filter({ hasText: 'alert acknowledged' }).waitFor()
  await page.getByRole('region', { name: 'Alerts' }).getByText(/^Acknowledged /).waitFor()
  await ask('alert-acknowledged', prjID)
  const log = page.getByRole('log', { name: 'Server log lines' })
  await ask('log-marker', prjID + ' e2e-marker')
  await log.locator('.logline').filter({ hasText: 'e2e-marker' }).waitFor({ timeout: 20000 })
  // A severity filter restarts the tail: LOG lines go, and come back with all severities.
  await page.getByRole('button', { name: 'Warnings and errors only' }).click()
  await log.locator('.logline').filter({ hasText: 'e2e-marker' }).waitFor({ state: 'detached' })
  await page.getByRole('button', { name: 'All severities' }).click()
  await log.locator('.logline').filter({ hasText: 'e2e-marker' }).waitFor({ timeout: 20000 })
  await page.getByRole('region', { name: 'Index advice' }).getByRole('heading', { name: 'Index hygiene' }).waitFor()
  await page.getByRole('region', { name: 'Index advice' }).getByText('Reclaimable').waitFor()
  await shoot('project-monitoring')

  // The Backups tab once the sampler read the archiver (after the Monitoring tab's samples, which run on a
  // clock in the past: a sample now would break their statement snapshots): the archive advanced.
  await ask('archived-sample', prjID)
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Backups' }).click()
  await page.getByText(/the archive last advanced \d+ (s|min) ago/).first().waitFor()
  await page.getByText(/^Read \d+ s ago\.$/).waitFor()
  await shoot('project-backups-archiving')

  for (const [tab, heading] of [['Extensions', 'Extensions'], ['Settings', 'Settings'], ['Audit', 'Audit events']]) {
    await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: tab }).click()
    await page.getByRole('heading', { name: heading, exact: true }).waitFor()
    await shoot('project-' + tab.toLowerCase())
  }
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Overview' }).click()

  await page.getByRole('link', { name: 'Projects' }).first().click()
  await page.getByRole('link', { name: 'e2e shop' }).waitFor()
  await shoot('projects')
  // A project made elsewhere appears, ready, from the organization's event stream (the list's own poll
  // is 30 s apart).
  const made = await ask('create-project', 'made by the CLI')
  await page.getByRole('row').filter({ hasText: made }).locator('.badge-active').first().waitFor({ timeout: 20000 })

  // An ephemeral database made with no account, claimed through its claim_url: it becomes a project.
  const claimPath = await ask('ephemeral')
  await page.goto(base + claimPath)
  await page.getByRole('heading', { name: 'Claim a database' }).waitFor()
  await page.locator('.facts .badge-active').waitFor({ timeout: 30000 })
  await shoot('claim')
  await page.getByRole('button', { name: /^Claim into/ }).click()
  await page.getByRole('heading', { name: 'claimed scratch' }).waitFor()
  await page.locator('.facts .badge-active').first().waitFor()

  // An API key: created with a scope, its secret shown once, then revoked.
  await page.getByRole('link', { name: 'API keys' }).click()
  await page.getByRole('heading', { name: 'API keys' }).waitFor()
  await page.getByLabel('Name', { exact: true }).fill('e2e key')
  await page.getByRole('button', { name: 'Create key' }).click()
  await page.getByRole('button', { name: 'Show New API key' }).click() // a secret is masked until shown
  const secret = await page.getByRole('textbox', { name: 'New API key' }).inputValue()
  await ask('key-works', secret)
  await shoot('api-keys')
  await page.getByRole('button', { name: 'Done' }).click()
  await page.getByRole('button', { name: 'Revoke e2e key' }).click()
  await page.getByRole('row').filter({ hasText: 'e2e key' }).getByText('revoked').waitFor()
  await ask('key-revoked', secret)

  // A member added, their initial password shown once.
  await page.getByRole('link', { name: 'Members' }).click()
  await page.getByLabel('Email').fill('dana@example.com')
  await page.getByLabel('Name').fill('Dana Müller')
  await page.getByRole('button', { name: 'Add', exact: true }).click()
  await page.getByRole('textbox', { name: 'Initial password' }).waitFor()
  await shoot('members')
  await page.getByRole('button', { name: 'Done' }).click()

  // A webhook endpoint: its secret shown once, a test event that fails once then is delivered, its
  // attempts and payload shown.
  const receiver = await ask('webhook-receiver')
  await page.getByRole('link', { name: 'Webhooks' }).click()
  await page.getByRole('heading', { name: 'Webhooks' }).waitFor()
  await page.getByLabel('URL').fill(receiver)
  await page.getByLabel('Description').fill('e2e receiver')
  await page.getByRole('checkbox', { name: 'job.completed' }).check()
  await page.getByRole('button', { name: 'Add endpoint' }).click()
  await page.getByRole('button', { name: 'Show Signing secret' }).click()
  const hookSecret = await page.getByRole('textbox', { name: 'Signing secret' }).inputValue()
  await ask('webhook-secret', hookSecret)
  await page.getByRole('button', { name: 'Done' }).click()
  await page.getByRole('button', { name: 'Send a test event to ' + receiver }).click()
  const deliveries = page.getByRole('region', { name: 'Deliveries to ' + receiver })
  await deliveries.locator('.badge-delivered').waitFor({ timeout: 30000 })
  await deliveries.getByRole('button', { name: /^Details of / }).click()
  await deliveries.getByText('HTTP 500').first().waitFor()
  await deliveries.getByText('"type": "webhook.test"').waitFor()
  await shoot('webhooks')
  await ask('webhook-verified')

  await page.getByRole('link', { name: 'Overview' }).click()
  await page.getByRole('heading', { name: 'Quotas' }).waitFor()
  await shoot('overview')
  await page.getByRole('link', { name: 'Account' }).click()
  await page.getByRole('heading', { name: 'Change password' }).waitFor()
  await shoot('account')

  // The CLI's device login, approved on the page the CLI printed.
  const login = await ask('cli-login')
  await page.goto(base + '/cli/login/' + login)
  await page.getByRole('heading', { name: 'Approve a CLI login' }).waitFor()
  await page.getByText('e2e laptop', { exact: true }).waitFor()
  await shoot('cli-login')
  await page.getByRole('button', { name: 'Approve' }).click()
  await page.getByRole('status').filter({ hasText: 'Approved' }).waitFor()
  await ask('cli-key')

  // A session that ends (here: its cookie dropped) brings the sign-in back, and signing in again returns
  // to the same page.
  await page.getByRole('link', { name: 'Members' }).click()
  await page.getByRole('heading', { name: 'Members' }).waitFor()
  await ctx.clearCookies()
  // Opened anew: a click on the menu could lose the race to a poll of the page, whose 401 brings the
  // sign-in first (and on the Members page's address).
  await page.goto(base + '/api-keys')
  await page.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
  await page.getByLabel('Email').fill(process.env.EMAIL)
  await page.getByLabel('Password').fill(process.env.PASSWORD)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'API keys' }).waitFor()
  if (new URL(page.url()).pathname !== '/api-keys') throw new Error('after signing in again: ' + page.url())

  await (await import('./sqleditor.mjs')).run(page, { ask, shoot, base, consoleErrors, direct }) // issue 28 §3.1, the SQL editor (h-sqled)
  await (await import('./consa.mjs')).run(page, { ask, shoot, base, out, widths, consoleErrors }) // issue 28's defects (h-consa)
  await consb(page, { base, shoot, axe, consoleErrors }) // issue 28 §1: 6, 8, 9, 12, 13, 14
  await (await import('./logs.mjs')).run(page, { ask, shoot, base, prjID, consoleErrors }) // the logs explorer (ui/e2e/logs.mjs)
  await (await import('./branches.mjs')).run(page, { ask, shoot, base }) // issue 28 §3.5, previews as branches (h-branches)
  await (await import('./connw.mjs')).run(page, { ask, shoot, base, consoleErrors }) // issue 28 §3.6, §3.7: connection widget, databases and roles (h-connw)
  await (await import('./palette.mjs')).run(page, { ask, shoot, base, out, widths }) // invitations, audit filters, Ctrl+K (h-palette)
  await (await import('./home.mjs')).run(page, { ask, shoot, base, prjID }) // issue 28 §3.3, §3.8: project home, alert badges, list search and sort, restart (h-home)
  await (await import('./left.mjs')).run(page, { shoot, base, consoleErrors }) // issue 28's leftovers: phone layout, drop a role, a log line's query (h-left)
  await (await import('./tabled.mjs')).run(page, { ask, shoot, base, prjID, widths }) // issue 28 §3.2, the table editor (h-tabled)
  await (await import('./wake.mjs')).run(page, { shoot, base, prjID }) // issue 33: scale to zero's setting (h-wake)
  await (await import('./zero.mjs')).run(page, { ask, shoot, base, prjID }) // issue 33: suspensions in the charts, compute time (h-zero)
  await (await import('./integrations.mjs')).run(page, { ask, shoot, base, prjID }) // issue 30: a project's Integrations tab (h-integ)
  await (await import('./upgrades.mjs')).run(page, { ask, shoot, base }) // issue 31: the Upgrades card, a real preflight, upgrade to 17 and confirm (h-upui)
  await (await import('./operator.mjs')).run(page, { ask, shoot }) // issue 29 §1–2: the platform operator's organizations (h-orgs); signs in as the operator
  await (await import('./plans.mjs')).run(page, { ask, shoot }) // issue 29 §3–4: usage, quotas, plans, the organization's billing status (h-plans); ends signed in as an operator
  await (await import('./programs.mjs')).run(page, { ask, shoot, consoleErrors }) // issue 29 §5: program applications and service tokens on the Operator page (h-programs)
  await (await import('./signup.mjs')).run(page, { ask, shoot, base }) // issue 29 §2, §5: sign-up and referrals (h-signup); ends signed in as an operator
  await (await import('./nodes.mjs')).run(page, { shoot, base }) // issue 35 §6: the Operator area's Nodes view (h-nodesui)
  await page.goto(base + '/nothing/here')
  await page.getByRole('heading', { name: 'Not found' }).waitFor()

  // Signing out ends the session: the next page load asks to sign in again.
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
  await page.reload()
  await page.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
  if (consoleErrors.filter((e) => !e.includes('401')).length) throw new Error('console errors: ' + consoleErrors.join('\n'))
  if (violations.length) throw new Error('accessibility (axe-core): ' + violations.join(' | '))
  console.log('done')
} catch (e) {
  await page.screenshot({ path: `${out}/failure.png`, fullPage: true }).catch(() => {})
  console.log('error ' + String(e).replace(/\n/g, ' | '))
  process.exitCode = 1
} finally {
  await browser.close()
  process.exit(process.exitCode ?? 0) // stdin (the Go test's answers) would keep node alive
}
