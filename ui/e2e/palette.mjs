// Issue 28 §3.9 in the browser: accepting an invitation through its link as another person (who belongs to
// no organization, so signs in only to answer it), filtering the audit, jumping to a project with Ctrl+K.
// dashboard.mjs runs this near its end, signed in as the owner, with the project "e2e shop".

export async function run(page, { ask, shoot, base, out, widths }) {
  const fail = (msg) => { throw new Error('palette: ' + msg) }

  // Ctrl+K opens the palette; typing filters; Enter goes to the project. Escape closes it.
  await page.goto(base + '/account')
  await page.getByRole('heading', { name: 'Account' }).first().waitFor()
  await page.keyboard.press('Control+k')
  const dialog = page.getByRole('dialog', { name: 'Jump to a project or page' })
  await dialog.waitFor()
  const box = dialog.getByRole('combobox')
  // The dialog shows, then its effect focuses the search box (a moment later on a busy machine).
  await page.waitForFunction(() => document.activeElement?.getAttribute('role') === 'combobox', null, { timeout: 5000 })
    .catch(() => fail('the search box has no focus'))
  await box.fill('e2e shp')
  await dialog.getByRole('option', { name: /e2e shop/ }).first().waitFor()
  await shoot('palette')
  await page.keyboard.press('Tab')
  if (!(await box.evaluate((el) => el === document.activeElement))) fail('Tab left the dialog')
  await page.keyboard.press('Escape')
  await dialog.waitFor({ state: 'hidden' })
  await page.getByRole('button', { name: /Jump to/ }).click()
  await dialog.waitFor()
  await box.fill('e2e shop audit')
  // The list is filtered as the box changes, a render later on a busy machine: the best match is read
  // until it is the audit page or 5 s passed (then the last one read is what failed).
  let first = ''
  for (const until = Date.now() + 5000; Date.now() < until; await page.waitForTimeout(100)) {
    first = await dialog.getByRole('option').first().textContent()
    if (/e2e shop · Audit/.test(first)) break
  }
  if (!/e2e shop · Audit/.test(first)) fail('the best match of "e2e shop audit" is ' + first)
  await page.keyboard.press('ArrowDown')
  await page.keyboard.press('ArrowUp')
  await page.keyboard.press('Enter')
  await dialog.waitFor({ state: 'hidden' })
  await page.getByRole('heading', { name: 'Audit events' }).waitFor()
  if (!/\/projects\/prj_[^/]+\/audit$/.test(new URL(page.url()).pathname)) fail('Enter went to ' + page.url())

  // The audit filter: only the actions that start with "project." are listed.
  await page.getByLabel('Action starts with').fill('project.')
  await page.getByRole('button', { name: 'Filter' }).click()
  const table = page.getByRole('table').first()
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('main table tbody tr')]
    return rows.length > 0 && rows.every((r) => r.cells[1]?.textContent.startsWith('project.'))
  })
  if (!(await table.isVisible())) fail('no audit table')
  await shoot('project-audit-filtered')

  // A person of no organization opens the invitation's link, signs in, lands on it and accepts.
  const [email, password, invitation] = (await ask('palette-invite')).split(' ')
  const other = await page.context().browser().newContext({ ignoreHTTPSErrors: true, viewport: widths.desktop })
  const them = await other.newPage()
  try {
    await them.goto(base + '/invitations/' + invitation)
    await them.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
    await them.getByLabel('Email').fill(email)
    await them.getByLabel('Password').fill(password)
    await them.getByRole('button', { name: 'Sign in' }).click()
    await them.getByRole('heading', { name: 'Invitation', exact: true }).waitFor()
    await them.getByRole('button', { name: 'Accept and join' }).waitFor()
    for (const [w, size] of Object.entries(widths)) {
      await them.setViewportSize(size)
      await them.screenshot({ path: `${out}/invitation-${w}.png`, fullPage: true })
    }
    await them.setViewportSize(widths.desktop)
    await them.getByRole('button', { name: 'Accept and join' }).click()
    await them.getByRole('heading', { name: 'Projects' }).first().waitFor()
    await them.getByRole('link', { name: 'e2e shop' }).waitFor()
    const role = await ask('palette-joined')
    if (role !== 'admin') fail('after accepting: ' + role)
  } finally {
    await other.close()
  }
}
