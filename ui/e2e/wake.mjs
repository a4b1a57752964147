// Scale to zero's setting (issue 33, h-wake; called once from dashboard.mjs, near the end): the project's
// Settings show suspend_after_seconds (0: never, or 300, the development projects' default), change it
// to 600, show the saved value after a reload of the page, and put back what it was.
export async function run(page, { shoot, base, prjID }) {
  await page.goto(base + '/projects/' + prjID)
  const nav = page.getByRole('navigation', { name: 'Project' })
  await nav.getByRole('link', { name: 'Settings' }).click()
  await page.getByRole('heading', { name: 'Settings', exact: true }).waitFor()
  const field = page.getByLabel('Suspend after idle (seconds, 0 for never)')
  const before = await field.inputValue()
  if (before !== '0' && before !== '300') throw new Error(`the project's suspend_after_seconds shows ${before}, want 0 or 300`)
  await field.fill('600')
  await page.getByRole('button', { name: 'Save', exact: true }).click()
  await page.getByRole('status').filter({ hasText: 'Saved' }).waitFor()
  await page.reload()
  await page.getByRole('heading', { name: 'Settings', exact: true }).waitFor()
  const after = await page.getByLabel('Suspend after idle (seconds, 0 for never)').inputValue()
  if (after !== '600') throw new Error(`suspend_after_seconds after saving 600 and reloading: ${after}`)
  await shoot('project-settings-suspend')
  await page.getByLabel('Suspend after idle (seconds, 0 for never)').fill(before)
  await page.getByRole('button', { name: 'Save', exact: true }).click()
  await page.getByRole('status').filter({ hasText: 'Saved' }).waitFor()
}
