// Scale to zero in the dashboard (issue 33, h-zero; called once from dashboard.mjs, near the end): the Go
// side suspends the project and records an earlier suspension (15 to 8 minutes ago); the Monitoring tab's
// six history charts shade the suspensions and say so (its live snapshot wakes the project, as a
// connection would); the organization's overview shows the compute time of the month and the suspended
// time; POST …/resume answers 200.
export async function run(page, { ask, shoot, base, prjID }) {
  await ask('zero-suspended', prjID)
  await page.goto(base + '/projects/' + prjID + '/monitoring')
  await page.getByRole('heading', { name: 'History', exact: true }).waitFor()
  await page.getByRole('button', { name: '1 h', exact: true }).click()
  const charts = page.locator('.charts .tchart')
  await charts.nth(5).locator('canvas').waitFor()
  const shaded = await page.locator('.charts .tchart:not([data-bands="0"])').count()
  if (shaded !== 6) throw new Error(`charts shading the suspensions: ${shaded}, want 6`)
  await page.getByText(/Shaded: \d+ periods? the project was suspended/).waitFor()
  await charts.first().scrollIntoViewIfNeeded()
  await shoot('project-monitoring-suspended')

  await page.goto(base + '/overview')
  const compute = page.locator('dt', { hasText: 'Compute this month' })
  await compute.waitFor()
  const value = (await page.locator('dt:has-text("Compute this month") + dd').innerText()).trim()
  // What the usage answers, as the card shows it: hours, and the suspended hours when there are any.
  const totals = await page.evaluate(async () => {
    const me = await (await fetch('/v1/me', { headers: { Accept: 'application/json', 'X-Appliance-CSRF': '1' } })).json()
    const org = me.organization?.id ?? me.organizations?.[0]?.id
    return (await (await fetch('/v1/organizations/' + org + '/usage', { headers: { Accept: 'application/json', 'X-Appliance-CSRF': '1' } })).json()).usage.totals
  })
  if (!(totals.compute_seconds > 0 && totals.suspended_seconds > 0)) throw new Error(`usage totals: ${JSON.stringify(totals)}, want compute and suspended seconds`)
  if (!/^\d[\d.,]* h \(\d[\d.,]* h suspended\)$/.test(value)) throw new Error(`the overview's compute: ${value}`)
  await shoot('overview-compute')

  const status = await page.evaluate(async (id) => (await fetch('/v1/projects/' + id + '/resume', {
    method: 'POST', headers: { 'X-Appliance-CSRF': '1', Accept: 'application/json' } })).status, prjID)
  if (status !== 200) throw new Error(`POST …/resume: ${status}`)
}
