// The Upgrades card (issue 31, h-upui; called once from dashboard.mjs, near the end): a project of its own
// on 15 with a table without a primary key; its Settings show PostgreSQL 17 installed (the npm build:
// server only, by logical replication); a preflight lists the blocker, then, the key added, passes with
// its warnings; the upgrade shows its progress, then its outcome and the window awaiting confirm; the
// server says 17 with the rows; confirm ends the window. The project is deleted after.
export async function run(page, { ask, shoot, base }) {
  await page.goto(base + '/projects')
  await page.getByRole('heading', { name: 'Projects' }).waitFor()
  await page.getByLabel('Name').fill('e2e upgrade')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'e2e upgrade' }).waitFor()
  await page.locator('.facts .badge-active').first().waitFor({ timeout: 120000 })
  await page.getByRole('button', { name: 'Show Direct connection' }).click()
  const direct = await page.getByLabel('Direct connection', { exact: true }).inputValue()
  await ask('write', direct + " CREATE TABLE notes (body text); INSERT INTO notes SELECT 'note ' || g FROM generate_series(1, 3) g")

  await page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Settings' }).click()
  const card = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Upgrades', exact: true }) })
  await card.getByText('(major 15)').waitFor()
  const row = card.getByRole('row').filter({ hasText: '17' })
  await row.getByText('logical replication').waitFor()
  await row.getByText('no (server only)').waitFor()
  await card.getByText('has no client tools here').waitFor()

  // A blocker, listed; then fixed, the preflight passes with what to know.
  await card.getByRole('button', { name: 'Preflight' }).click()
  await card.locator('.upgrade-blockers li').filter({ hasText: 'public.notes has no primary key' }).waitFor({ timeout: 120000 })
  await shoot('project-upgrades-blockers')
  await ask('write', direct + ' ALTER TABLE notes ADD COLUMN id serial PRIMARY KEY')
  await card.getByRole('button', { name: 'Preflight' }).click()
  await card.getByText('No blockers: the upgrade can run.').waitFor({ timeout: 120000 })
  await card.locator('.upgrade-warnings li').filter({ hasText: 'has no client tools' }).waitFor()
  await shoot('project-upgrades-preflight')

  // The upgrade (its confirmation accepted): its progress while it runs, then its outcome.
  await card.getByRole('button', { name: 'Upgrade to 17' }).click()
  await card.locator('.upgrade-progress dt').filter({ hasText: 'Step' }).waitFor({ timeout: 60000 })
  await page.screenshot({ path: `${process.env.OUT_DIR}/project-upgrades-progress-desktop.png`, fullPage: true })
  // The catch-up (tables synchronized, lag) lasts a few seconds of a poll each second: shot when seen.
  const lag = card.locator('.upgrade-progress dt').filter({ hasText: 'Lag' })
  const outcome = card.locator('.upgrade-progress dt').filter({ hasText: 'Write pause' })
  const first = await Promise.race([lag.waitFor({ timeout: 300000 }).then(() => 'catch-up', () => ''), outcome.waitFor({ timeout: 300000 }).then(() => 'outcome', () => '')])
  if (first === 'catch-up') {
    const progress = await card.locator('.upgrade-progress .facts').innerText()
    if (!/Tables synchronized\s+\d+ of 1/.test(progress)) throw new Error(`the catch-up's progress: ${progress}`)
    await page.screenshot({ path: `${process.env.OUT_DIR}/project-upgrades-catchup-desktop.png`, fullPage: true })
  }
  await outcome.waitFor({ timeout: 300000 })
  const facts = await card.locator('.upgrade-progress .facts').innerText()
  for (const want of [/Tables synchronized\s+1\b/, /To\s+17\b/, /Method\s+logical/]) {
    if (!want.test(facts)) throw new Error(`the upgrade's outcome lacks "${want}": ${facts}`)
  }
  await card.getByRole('region', { name: 'Upgrade awaiting confirmation' }).getByText('Upgraded from PostgreSQL 15 to 17').waitFor()
  await card.getByText('(major 17)').waitFor()
  await shoot('project-upgrades-window')
  await ask('query', direct + " SELECT 1 FROM notes WHERE version() LIKE 'PostgreSQL 17%' HAVING count(*) = 3")

  // Confirm (accepted): the window closes, no newer major is left.
  const asked = page.waitForEvent('dialog', { timeout: 5000 }) // accepted by dashboard.mjs's handler
  await card.getByRole('button', { name: 'Confirm upgrade' }).click()
  const d = await asked
  if (d.type() !== 'confirm' || !/^Confirm the upgrade to PostgreSQL 17\?.*no rolling back/.test(d.message())) throw new Error(`Confirm upgrade asked ${d.type()} "${d.message()}"`)
  await card.getByText('Confirmed: the old server is gone.').waitFor({ timeout: 120000 })
  await card.getByText('No newer PostgreSQL major is installed').waitFor()
  if (await card.getByRole('region', { name: 'Upgrade awaiting confirmation' }).count()) throw new Error('the upgrade window is still shown after confirm')
  await shoot('project-upgrades-confirmed')

  await page.getByLabel(/Type the project name, e2e upgrade, to confirm/).fill('e2e upgrade')
  await page.getByRole('button', { name: 'Delete project' }).click()
  await page.getByRole('heading', { name: 'Projects' }).waitFor()
}
