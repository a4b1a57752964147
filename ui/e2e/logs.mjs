// The logs explorer in the browser (called once from dashboard.mjs): statements run in the SQL studio
// leave a LOG line and an ERROR line in the server's log; the explorer finds them by text (ignoring
// case), narrows by severity and by the SQLSTATE of a line, searches a custom range, downloads the
// matches as NDJSON, and opens a line's statement in the SQL studio.
import { readFileSync } from 'node:fs'

export async function run(page, { shoot, base, prjID, consoleErrors }) {
  const nav = page.getByRole('navigation', { name: 'Project' })
  // search clicks Search and waits for the API's answer and its rendering.
  const search = async () => {
    await Promise.all([page.waitForResponse((r) => new URL(r.url()).pathname.endsWith('/logs')), page.getByRole('button', { name: 'Search', exact: true }).click()])
    await page.getByRole('button', { name: 'Search', exact: true }).waitFor()
  }
  await page.goto(base + '/projects/' + prjID + '/sql')
  const editor = page.getByRole('textbox', { name: 'Query' })
  // Text goes in the way sqleditor.mjs types it (fill would restyle the highlighted text inline, which the
  // CSP refuses).
  const setText = async (text) => {
    await editor.click()
    await page.keyboard.press('Control+a')
    await page.keyboard.press('Backspace')
    await page.keyboard.insertText(text)
    await page.keyboard.press('Escape')
  }
  await setText("DO $$ BEGIN RAISE LOG 'e2e_explorer note'; END $$")
  await page.getByRole('button', { name: 'Run', exact: true }).click()
  await page.locator('.history li').filter({ hasText: 'e2e_explorer note' }).first().waitFor()
  const missing = 'SELECT * FROM e2e_explorer_missing'
  const before = consoleErrors.length
  await setText(missing)
  await page.getByRole('button', { name: 'Run', exact: true }).click()
  await page.getByRole('alert').filter({ hasText: 'e2e_explorer_missing' }).getByText('SQLSTATE 42P01').waitFor()
  // The browser logs the SQL error's 400 answer; that one is expected.
  consoleErrors.splice(before, consoleErrors.length - before, ...consoleErrors.slice(before).filter((e) => !e.includes('status of 400')))

  await nav.getByRole('link', { name: 'Logs', exact: true }).click()
  await page.getByRole('heading', { name: 'Logs explorer' }).waitFor()
  const results = page.getByRole('list', { name: 'Matching log lines, newest first' })
  const errorLine = results.locator('li').filter({ hasText: 'relation "e2e_explorer_missing" does not exist' })
  const noteLine = results.locator('li').filter({ hasText: 'e2e_explorer note' })
  // The logging collector writes asynchronously: search again until both lines are there.
  await page.getByLabel(/^Text/).fill('E2E_EXPLORER')
  for (let i = 0; ; i++) {
    await search()
    if ((await errorLine.count()) === 1 && (await noteLine.count()) >= 1) break
    if (i === 50) throw new Error('the explorer never found the lines: ' + (await page.locator('main').innerText()))
    await page.waitForTimeout(200)
  }
  if (!(await errorLine.getByText('STATEMENT: ' + missing).count())) throw new Error('the error line has no statement')
  await shoot('project-logs')

  // Errors only: the LOG line goes, the ERROR line stays; its SQLSTATE narrows the search.
  await page.getByLabel('Severity').selectOption({ label: 'Errors' })
  await search()
  await noteLine.first().waitFor({ state: 'detached' })
  await errorLine.waitFor()
  await Promise.all([page.waitForResponse((r) => new URL(r.url()).searchParams.get('sqlstate') === '42P01'), errorLine.getByRole('button', { name: '42P01' }).click()])
  if ((await page.getByLabel('SQLSTATE').inputValue()) !== '42P01') throw new Error('the SQLSTATE filter was not set')
  await errorLine.waitFor()

  // A custom range (the last hour, in local time) finds it too.
  await page.getByLabel('Time range').selectOption('custom')
  await page.getByLabel(/^From/).waitFor()
  await search()
  await errorLine.waitFor()
  await shoot('project-logs-filtered')

  // The download: every match as NDJSON.
  const [dl] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /^Download all matches/ }).click()])
  if (!dl.suggestedFilename().endsWith('.ndjson')) throw new Error('download name: ' + dl.suggestedFilename())
  const lines = readFileSync(await dl.path(), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
  if (!lines.length || !lines.every((l) => l.sqlstate === '42P01' && l.severity === 'error') || !lines.some((l) => l.statement === missing)) {
    throw new Error('downloaded: ' + JSON.stringify(lines))
  }

  // A line's statement opens in the SQL studio, prefilled.
  await errorLine.getByRole('link', { name: 'Open in SQL studio' }).click()
  await editor.waitFor()
  if ((await editor.innerText()).trim() !== missing) throw new Error('the studio was not prefilled: ' + (await editor.innerText()))
}
