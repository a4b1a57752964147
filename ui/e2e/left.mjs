// Issue 28's leftovers in the browser (called once from dashboard.mjs, signed in as the owner, with the
// project "e2e shop" active). On a phone (390 px) no page scrolls sideways: the top navigation wraps
// (every link inside the screen) on every page, and a preview's row with its five actions fits. A role is
// dropped from the Databases & roles tab after a confirmation. A log line of a statement (logs.mjs's note,
// which carries its query_id) links to that query's detail in monitoring.
export async function run(page, { shoot, base, consoleErrors }) {
  const fail = (msg) => { throw new Error('left: ' + msg) }
  const phone = { width: 390, height: 844 }
  const desktop = { width: 1280, height: 800 }
  const problems = [] // the layout's, all reported at the end (one run shows every page that does not fit)
  // fits checks the page at phone width: nothing past the right edge, every main link inside the screen.
  const fits = async (name) => {
    await page.setViewportSize(phone)
    const r = await page.evaluate(() => ({
      scroll: document.documentElement.scrollWidth,
      inner: window.innerWidth,
      wide: [...document.body.querySelectorAll('*')]
        .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 0.5 && !(e.parentElement && e.parentElement.getBoundingClientRect().right > window.innerWidth + 0.5))
        .slice(0, 6)
        .map((e) => `${e.tagName.toLowerCase()}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`),
      cut: [...document.querySelectorAll('header nav a')].filter((a) => a.getBoundingClientRect().right > window.innerWidth + 0.5 || a.getBoundingClientRect().left < 0).map((a) => a.textContent),
    }))
    await page.setViewportSize(desktop)
    if (r.scroll > r.inner) problems.push(`${name}: the page is ${r.scroll} px wide on a ${r.inner} px phone (${r.wide.join(', ')})`)
    if (r.cut.length) problems.push(`${name}: top navigation links cut at the phone's edge: ${r.cut.join(', ')}`)
  }
  const main = page.getByRole('navigation', { name: 'Main' })
  for (const [link, path] of [['Overview', '/overview'], ['Projects', '/projects'], ['API keys', '/api-keys'], ['Members', '/members'], ['Webhooks', '/webhooks'], ['Account', '/account']]) {
    await page.goto(base + path)
    await page.locator('main h1').waitFor()
    await fits(link)
  }
  // On desktop the navigation stays one line, beside the brand.
  const top = await main.getByRole('link').evaluateAll((as) => [...new Set(as.map((a) => Math.round(a.getBoundingClientRect().top)))])
  if (top.length !== 1) fail('the desktop navigation is not one line: ' + top.join(', '))
  await shoot('left-nav')

  // A preview's row (here while it starts, then active) with the longest name a preview may have.
  await page.goto(base + '/projects')
  await page.getByRole('link', { name: 'e2e shop' }).click()
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Previews', exact: true }).click()
  const name = 'e2e-phone-preview-with-a-long-name'
  await page.getByLabel('Name (optional)').fill(name)
  await page.getByLabel('Contents').selectOption('empty')
  await page.getByRole('button', { name: 'Create preview' }).click()
  const row = page.getByRole('row').filter({ hasText: name })
  await row.waitFor()
  await fits('previews (starting)')
  await row.locator('.badge-active').waitFor({ timeout: 120000 })
  await fits('previews')
  await shoot('left-previews')
  await page.getByRole('button', { name: 'Delete ' + name }).click()
  await row.waitFor({ state: 'detached', timeout: 60000 })

  // Dropping a role: asked first, then gone from the list (and from the server: the list is read again).
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Databases & roles', exact: true }).click()
  await page.getByLabel('Role name').fill('e2e_dropped')
  await page.getByRole('button', { name: 'Create role' }).click()
  await page.getByRole('button', { name: 'Done' }).click()
  const cell = page.getByRole('cell', { name: 'e2e_dropped', exact: true })
  await cell.waitFor()
  const [dialog] = await Promise.all([page.waitForEvent('dialog'), page.getByRole('button', { name: 'Drop role e2e_dropped' }).click()])
  if (!dialog.message().includes('Drop the role “e2e_dropped”')) fail('the drop asked: ' + dialog.message())
  await cell.waitFor({ state: 'detached' })
  await page.reload()
  await page.getByRole('heading', { name: 'Roles' }).waitFor()
  await page.getByText('the project’s role: its password changes').waitFor()
  if (await cell.count()) fail('the dropped role is back after a reload')
  await shoot('left-roles')

  // The logs explorer's line → its query in monitoring, by its query_id.
  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Logs', exact: true }).click()
  await page.getByLabel(/^Text/).fill('e2e_explorer note')
  await Promise.all([page.waitForResponse((r) => new URL(r.url()).pathname.endsWith('/logs')), page.getByRole('button', { name: 'Search', exact: true }).click()])
  const link = page.getByRole('list', { name: 'Matching log lines, newest first' }).locator('li').filter({ hasText: 'e2e_explorer note' }).first().getByRole('link', { name: 'Its query in monitoring' })
  const href = await link.getAttribute('href')
  if (!/\/monitoring\?query_id=-?\d+$/.test(href)) fail('the log line links to ' + href)
  const before = consoleErrors.length
  await link.click()
  const detail = page.getByRole('region', { name: 'Query details' })
  await detail.waitFor()
  // Its detail, or (the statements are snapshotted every 5 minutes) the API's 404 saying no snapshot has it
  // yet, which the browser logs: that one is expected.
  await detail.getByText(/e2e_explorer note|not found: no snapshot/).first().waitFor()
  consoleErrors.splice(before, consoleErrors.length - before, ...consoleErrors.slice(before).filter((e) => !e.includes('status of 404')))
  await shoot('left-logged-query')
  if (problems.length) fail(problems.join(' | '))
}
