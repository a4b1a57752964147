// Issue 28 §3.1, the SQL editor, in the browser. dashboard.mjs runs this near its end, signed in as the
// owner, with the project "e2e shop" active: completion of a table name, two statements and both results,
// a pg_sleep cancelled (and gone from the server), EXPLAIN ANALYZE as a plan tree, a query saved, renamed
// and reopened, a CSV export, and a 50,000-row result windowed, with the page's longest long task
// (PerformanceObserver 'longtask') reported, not asserted.
import { readFileSync } from 'node:fs'

export async function run(page, { ask, shoot, base, consoleErrors, direct }) {
  const fail = (msg) => { throw new Error('sqleditor: ' + msg) }
  // The browser logs the error answers provoked on purpose (the cancelled run's 400).
  const expected = (from) => consoleErrors.splice(from, consoleErrors.length - from, ...consoleErrors.slice(from).filter((e) => !e.includes('status of 400')))
  await page.goto(base + '/projects')
  await page.getByRole('link', { name: 'e2e shop' }).click()
  await page.getByRole('heading', { name: 'e2e shop' }).waitFor()
  await page.goto(page.url().replace(/\/$/, '') + '/sql')
  const editor = page.getByRole('textbox', { name: 'Query' })
  await editor.waitFor()
  // Text goes in as a person's would: the old text selected and deleted by the editor's own keys, the new
  // one inserted (fill would have Chromium's editing restyle the highlighted text with inline styles, which
  // the CSP refuses).
  const setText = async (text) => {
    await editor.click()
    await page.keyboard.press('Control+a')
    await page.keyboard.press('Backspace')
    await page.keyboard.insertText(text)
    await page.keyboard.press('Escape') // a completion list the text opened
  }
  const run = () => page.getByRole('button', { name: 'Run', exact: true }).click()
  const statement = (n, of) => page.getByRole('region', { name: `Statement ${n} of ${of}` })

  // A table of the module's own, made in the editor; the completion learns it from the run.
  await page.getByRole('button', { name: 'New tab', exact: true }).click()
  await setText("CREATE TABLE e2e_items (id int PRIMARY KEY, label text NOT NULL);\nINSERT INTO e2e_items SELECT g, 'item ' || g FROM generate_series(1, 500) g")
  await run()
  await statement(2, 2).getByText('INSERT 0 500').waitFor()

  // Completion: typing the start of the table's name offers it; Enter takes it.
  await page.getByRole('button', { name: 'New tab', exact: true }).click()
  await editor.click()
  await page.keyboard.type('SELECT id, label FROM e2e_it')
  await page.getByRole('option', { name: /e2e_items/ }).first().waitFor()
  await shoot('sqleditor-completion')
  await page.keyboard.press('Enter')
  if (!(await editor.innerText()).includes('FROM e2e_items')) fail('completion did not insert the table: ' + await editor.innerText())

  // Two statements, both results.
  await editor.press('End')
  await page.keyboard.type(' WHERE id <= 3 ORDER BY id;')
  await page.keyboard.press('Escape')
  await page.keyboard.press('Enter')
  await page.keyboard.type('SELECT count(*) AS n FROM e2e_items')
  await page.keyboard.press('Escape')
  await page.keyboard.press('Control+Enter')
  await statement(1, 2).getByRole('cell', { name: 'item 3', exact: true }).waitFor()
  await statement(2, 2).getByRole('cell', { name: '500', exact: true }).waitFor()
  if ((await statement(1, 2).getByRole('row').count()) !== 4) fail('statement 1 rows: ' + await statement(1, 2).getByRole('row').count())
  await shoot('sqleditor-two-statements')

  // Run with a selection runs only the selection.
  await setText('SELECT 41 AS selected;\nSELECT 42 AS other')
  await editor.press('Control+Home')
  await page.keyboard.press('Shift+End')
  await run()
  await statement(1, 1).getByRole('cell', { name: '41', exact: true }).waitFor()

  // Cancel a running pg_sleep: the run ends with a clear error, and the server no longer runs it.
  await setText('SELECT pg_sleep(30) /* e2e-cancel */')
  const before = consoleErrors.length
  const started = Date.now()
  await run()
  await page.getByRole('button', { name: 'Cancel', exact: true }).click()
  const cancelled = page.getByRole('alert').filter({ hasText: 'the run was cancelled' })
  await cancelled.getByText('SQLSTATE 57014').waitFor()
  console.log(`sqleditor: the cancelled pg_sleep(30) answered after ${Date.now() - started} ms`)
  expected(before)
  await ask('query', direct + " SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE '%e2e-cancel */%' AND pid <> pg_backend_pid())")
  await shoot('sqleditor-cancelled')

  // EXPLAIN ANALYZE as a plan tree.
  await setText('SELECT i.label FROM e2e_items i JOIN generate_series(1, 10) g ON g = i.id ORDER BY i.label')
  await page.getByRole('button', { name: 'Explain analyze' }).click()
  const plan = page.getByRole('group', { name: 'Plan tree' })
  await plan.locator('summary').filter({ hasText: 'e2e_items' }).first().waitFor()
  const nodes = await plan.locator('details.plan-node').count()
  if (nodes < 3) fail('plan nodes: ' + nodes)
  await plan.locator('summary').first().click() // collapses the tree
  if (await plan.locator('summary').filter({ hasText: 'e2e_items' }).first().isVisible()) fail('the plan did not collapse')
  await plan.locator('summary').first().click()
  await shoot('sqleditor-explain')

  // Save, rename, close, reopen.
  await setText('SELECT label FROM e2e_items WHERE id > 495 ORDER BY id')
  await page.getByRole('button', { name: 'Save as…' }).click()
  await page.getByLabel('Name', { exact: true }).fill('e2e last items')
  await page.getByRole('form', { name: 'Save the query' }).getByRole('button', { name: 'Save', exact: true }).click()
  const savedList = page.locator('.saved-queries')
  await savedList.getByText('e2e last items', { exact: true }).waitFor()
  await page.getByRole('button', { name: 'Rename e2e last items' }).click()
  await page.getByLabel('New name').fill('e2e newest items')
  await page.getByRole('button', { name: 'Rename', exact: true }).click()
  await savedList.getByText('e2e newest items', { exact: true }).waitFor()
  await page.getByRole('button', { name: 'e2e newest items', exact: true }).waitFor()
  await page.getByRole('button', { name: 'Close e2e newest items' }).click()
  await page.getByRole('button', { name: 'e2e newest items', exact: true }).waitFor({ state: 'detached' })
  await page.getByRole('button', { name: 'Open e2e newest items' }).click()
  await page.getByRole('button', { name: 'e2e newest items', exact: true, pressed: true }).waitFor()
  // The pressed tab comes a render before CodeMirror shows its document: wait for the text, then judge.
  await editor.filter({ hasText: 'WHERE id > 495' }).waitFor({ timeout: 10000 }).catch(() => {})
  if (!(await editor.innerText()).includes('WHERE id > 495')) fail('the reopened query: ' + await editor.innerText())
  const stored = await page.evaluate(() => fetch(location.pathname.replace(/\/sql$/, '') .replace('/projects/', '/v1/projects/') + '/saved-queries', { headers: { 'X-Appliance-CSRF': '1' } }).then((r) => r.json()))
  if (!stored.saved_queries.some((q) => q.name === 'e2e newest items' && q.sql.includes('id > 495'))) fail('stored: ' + JSON.stringify(stored))
  await shoot('sqleditor-saved')

  // Export CSV.
  await run()
  await statement(1, 1).getByRole('cell', { name: 'item 500', exact: true }).waitFor()
  const [download] = await Promise.all([page.waitForEvent('download'), statement(1, 1).getByRole('button', { name: 'CSV' }).click()])
  const csv = readFileSync(await download.path(), 'utf8')
  if (csv !== 'label\r\nitem 496\r\nitem 497\r\nitem 498\r\nitem 499\r\nitem 500\r\n') fail('CSV: ' + JSON.stringify(csv))

  // 50,000 rows: windowed, and the longest task the page ran while showing them.
  await setText("SELECT g AS id, md5(g::text) AS hash, now() AS at FROM generate_series(1, 50000) g")
  await page.evaluate(() => {
    window.__longTasks = []
    new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__longTasks.push(e.duration) }).observe({ type: 'longtask' })
  })
  await run()
  await statement(1, 1).getByText('50000 rows', { exact: true }).waitFor({ timeout: 60000 })
  const grid = statement(1, 1).getByRole('region', { name: 'Result of statement 1' })
  await grid.getByRole('cell', { name: '1', exact: true }).waitFor()
  for (let i = 1; i <= 10; i++) await grid.evaluate((el, f) => { el.scrollTop = el.scrollHeight * f }, i / 10)
  await grid.getByRole('cell', { name: '50000', exact: true }).waitFor()
  const inDOM = await grid.getByRole('row').count()
  if (inDOM > 80) fail('the 50,000-row grid renders ' + inDOM + ' rows')
  const longTasks = await page.evaluate(() => window.__longTasks)
  console.log(`sqleditor: 50,000 rows: ${inDOM} rows in the DOM; long tasks ${longTasks.length}, the longest ${Math.round(Math.max(0, ...longTasks))} ms`)
  await shoot('sqleditor-50000')
}
