// The project home, the alert badges, the project list's search and sort, and the restart, in the browser
// (called once from dashboard.mjs; issue 28 §3.3 and §3.8). The Go side (cmd/dashboard_home_test.go) gives
// the project a storage alert and a fresh sample, and reads the server's start time around the restart.
export async function run(page, { ask, shoot, base, prjID }) {
  await ask('home-data', prjID)
  await page.goto(base + '/projects/' + prjID)
  const home = page.getByRole('region', { name: 'At a glance' })
  await home.getByRole('meter', { name: 'Storage' }).waitFor()
  await home.getByRole('meter', { name: 'Connections' }).waitFor()
  await home.getByText(/^As sampled /).waitFor()
  // The sparklines: the sampler's CPU and memory (PSS of the server's processes, read from /proc).
  await home.getByRole('img', { name: /^CPU over the last 24 hours: now [\d.]+ cores?, peak / }).waitFor()
  await home.getByRole('img', { name: /^Memory over the last 24 hours: now [1-9][\d.]* (KiB|MiB|GiB), peak / }).waitFor()
  const backup = home.getByRole('group', { name: 'Last backup' })
  await backup.locator('.badge-completed').waitFor()
  await backup.getByRole('link', { name: 'Backups' }).waitFor()
  const alerts = home.getByRole('group', { name: 'Open alerts' })
  await alerts.getByRole('listitem').filter({ hasText: /^warning storage at \d+% of the limit/ }).waitFor()
  const see = await alerts.getByRole('link', { name: /^See \d+ alerts? in force$/ }).innerText()
  const n = Number(see.match(/\d+/)[0])
  const word = n === 1 ? 'alert' : 'alerts'
  // The Monitoring tab, where the alerts live, carries their count.
  const nav = page.getByRole('navigation', { name: 'Project' })
  await nav.getByRole('link', { name: `Monitoring ${n} ${word} in force`, exact: true }).waitFor()
  await shoot('project-home')

  // Restart from the page: it asks first (the dialog is accepted), then follows the job to its end; the
  // server's start time moved.
  const before = await ask('home-started', prjID)
  await home.getByRole('button', { name: 'Restart the server' }).click()
  const job = page.getByRole('status').filter({ hasText: 'Restart:' })
  await job.locator('.badge-completed').waitFor({ timeout: 60000 })
  await job.getByText('Sessions ended').waitFor()
  const after = await ask('home-started', prjID)
  if (!(after > before)) throw new Error(`the server's start time did not move: ${before} → ${after}`)
  await page.locator('.facts .badge-active').first().waitFor()
  await shoot('project-restarted')

  // The list: the alert badge links to the project's alerts; search by name or ID, sort, and the URL
  // keeps both across a reload.
  await page.getByRole('link', { name: 'Projects' }).first().click()
  const shop = page.getByRole('row').filter({ hasText: 'e2e shop' })
  await shop.getByRole('link', { name: `${n} ${word}`, exact: true }).waitFor()
  const { projects } = await page.evaluate(async () => (await fetch('/v1/projects', { headers: { 'X-Appliance-CSRF': '1' } })).json())
  if (projects.length < 2) throw new Error('too few projects to sort: ' + projects.length)
  const names = () => page.locator('tbody tr td:first-child > a:first-child').allInnerTexts()
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i])
  // The list re-renders a moment after the input (longer on a busy machine): wait for the order wanted.
  const namesAre = async (want, what) => {
    for (const end = Date.now() + 5000; Date.now() < end; await page.waitForTimeout(50)) if (same(await names(), want)) return
    throw new Error(`${what}: ${await names()} want ${want}`)
  }
  const box = page.getByRole('searchbox', { name: 'Search' })
  await box.fill('SHOP')
  await page.getByRole('status').filter({ hasText: /^\d+ of \d+ projects$/ }).waitFor()
  const found = await names()
  if (!found.length || !found.every((x) => x.toLowerCase().includes('shop'))) throw new Error('search shop: ' + found)
  await box.fill(prjID.slice(-8))
  await page.getByRole('status').filter({ hasText: new RegExp(`^1 of ${projects.length} projects$`) }).waitFor()
  await namesAre(['e2e shop'], 'search by ID')
  await box.fill('')
  const sortBy = page.getByLabel('Sort by')
  await sortBy.selectOption({ label: 'Newest first' })
  const newest = [...projects].sort((a, b) => b.created_at.localeCompare(a.created_at) || a.id.localeCompare(b.id)).map((p) => p.name).slice(0, 25)
  await namesAre(newest, 'newest first')
  await sortBy.selectOption({ label: 'Name' })
  const byName = [...projects].sort((a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id)).map((p) => p.name).slice(0, 25)
  await namesAre(byName, 'by name')
  await sortBy.selectOption({ label: 'State' })
  await box.fill('e2e')
  // The address follows the query once the page has rendered it (an effect: a moment later on a busy machine).
  await page.waitForFunction(() => location.search.includes('q=e2e') && location.search.includes('sort=state'), null, { timeout: 5000 })
    .catch(() => { throw new Error('the URL does not keep the query: ' + page.url()) })
  await page.reload()
  await page.getByRole('status').filter({ hasText: /projects?$/ }).waitFor()
  if ((await box.inputValue()) !== 'e2e' || (await sortBy.inputValue()) !== 'state') throw new Error('after a reload: ' + page.url())
  await shoot('projects-search')
  await box.fill('')
}
