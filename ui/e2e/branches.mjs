// Issue 28 §3.5, previews as branches, in the browser. dashboard.mjs runs this near its end, signed in as
// the owner, with the project "e2e shop" active: a restore point, a preview made at it (the source choice
// offers a past time within the window too), the tree of the project and its previews, the preview's schema
// changes after the Go side alters it, and the same changes on its cutover request before approval.
export async function run(page, { ask, shoot, base }) {
  const fail = (msg) => { throw new Error('branches: ' + msg) }
  const tab = (name) => page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name, exact: true }).click()
  await page.goto(base + '/projects')
  await page.getByRole('link', { name: 'e2e shop' }).click()
  await page.getByRole('heading', { name: 'e2e shop' }).waitFor()

  await tab('Backups')
  await page.getByLabel('Label (optional)').fill('before the branch')
  await page.getByRole('button', { name: 'Take a backup' }).click()
  await page.getByRole('row').filter({ hasText: 'before the branch' }).locator('.badge-verified').waitFor({ timeout: 60000 })
  await page.getByLabel('Label', { exact: true }).fill('branch point')
  await page.getByRole('button', { name: 'Create restore point' }).click()
  await page.getByRole('cell', { name: 'branch point', exact: true }).waitFor()

  await tab('Previews')
  // A past time: a local date-time field bounded by the point-in-time window.
  await page.getByLabel('Contents').selectOption('time')
  const at = page.getByLabel('As of (your local time)')
  const [min, max] = [await at.getAttribute('min'), await at.getAttribute('max')]
  if (!min || !max || !(min <= max)) fail(`the time field's window is ${min} … ${max}`)
  // A restore point, chosen from the project's.
  await page.getByLabel('Contents').selectOption('point')
  await page.getByLabel('Name (optional)').fill('e2e branch')
  const option = page.locator('#preview-point option').filter({ hasText: 'branch point' })
  await page.getByLabel('Restore point', { exact: true }).selectOption({ label: await option.innerText() })
  await page.getByRole('button', { name: 'Create preview' }).click()
  const row = page.getByRole('row').filter({ hasText: 'e2e branch' })
  await row.locator('.badge-active').waitFor({ timeout: 120000 })
  await row.getByText('as of restore point “branch point”').waitFor()
  await page.getByRole('row').filter({ hasText: 'e2e shop' }).filter({ hasText: 'the project · 1 preview' }).waitFor()
  if ((await row.locator('.tree-branch').innerText()).trim() !== '└─') fail('the preview is not drawn as the project\'s branch')

  await page.getByRole('button', { name: 'Connect to e2e branch' }).click()
  await page.getByRole('button', { name: 'Show Preview direct connection' }).click()
  const url = await page.getByLabel('Preview direct connection', { exact: true }).inputValue()
  await page.getByRole('button', { name: 'Done' }).click()
  await ask('write', url + ' ALTER TABLE todo ADD COLUMN branch_note text NOT NULL DEFAULT \'\'; CREATE INDEX todo_branch_note ON todo (branch_note); CREATE TABLE branch_only (id int PRIMARY KEY)')

  await page.getByRole('button', { name: 'Show schema changes of e2e branch' }).click()
  const diff = page.getByRole('region', { name: 'Schema changes of e2e branch' })
  await diff.getByText('3 schema changes against the project:').waitFor({ timeout: 20000 })
  const items = (await diff.getByRole('listitem').allInnerTexts()).map((s) => s.replace(/\s+/g, ' ').trim())
  const want = [
    '+ table public.branch_only added in the preview',
    "+ column public.todo.branch_note added in the preview text NOT NULL DEFAULT ''::text",
    '+ index public.todo_branch_note added in the preview CREATE INDEX todo_branch_note ON public.todo USING btree (branch_note)',
  ]
  if (items.join('\n') !== want.join('\n')) fail('the preview\'s schema changes:\n' + items.join('\n'))
  await shoot('branches-tree')

  // Its cutover request shows the same changes before an admin approves; rejected here, then deleted.
  const cutovers = page.locator('section', { has: page.getByRole('heading', { name: 'Cutover requests' }) })
  await page.getByRole('button', { name: 'Request cutover of e2e branch into the project' }).click()
  const onRequest = cutovers.getByRole('region', { name: 'Schema changes of e2e branch' })
  await onRequest.getByText('3 schema changes against the project:').waitFor({ timeout: 20000 })
  await onRequest.getByText('public.todo.branch_note').waitFor()
  await cutovers.getByRole('button', { name: 'Approve the cutover of e2e branch' }).waitFor()
  await shoot('branches-cutover')
  await page.getByRole('button', { name: 'Reject the cutover of e2e branch' }).click()
  await page.getByLabel('Reason for rejecting').fill('keep the branch for now')
  await page.getByRole('button', { name: 'Confirm rejection' }).click()
  await cutovers.getByRole('row').filter({ hasText: 'Rejected: keep the branch for now' }).waitFor({ timeout: 20000 })
  if (await onRequest.count()) fail('a rejected request still shows the schema changes')
  await page.getByRole('button', { name: 'Delete e2e branch' }).click()
  await page.getByText('No previews.').waitFor({ timeout: 60000 })
}
