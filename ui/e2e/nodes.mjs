// The Operator area's Nodes view (issue 35 §6; called once from dashboard.mjs after signup.mjs, signed in
// as an operator): reached from the Operator page's own navigation, it lists this single-node appliance as
// one node, alive, with no etcd member, its projects and its capacity bars, and says it is a single node.
export async function run(page, { shoot, base }) {
  await page.goto(base + '/operator')
  await page.getByRole('heading', { name: 'Organizations', exact: true }).waitFor()
  await page.getByRole('navigation', { name: 'Operator' }).getByRole('link', { name: 'Nodes' }).click()
  await page.getByRole('heading', { name: 'Nodes', exact: true }).waitFor()
  await page.getByRole('heading', { name: 'A single node' }).waitFor()
  const row = page.getByRole('row').filter({ hasText: 'this appliance' })
  await row.getByText('alive', { exact: true }).waitFor()
  await row.getByText('none', { exact: true }).waitFor()
  for (const m of ['Memory', 'Disk', 'Ports']) await row.getByRole('meter', { name: m }).waitFor()
  const projects = Number((await row.locator('td').nth(3).innerText()).split('\n')[0]) // the count, then the first ids
  if (!(projects >= 1)) throw new Error('the single node hosts no project in the Nodes view: ' + projects)
  await shoot('operator-nodes')
}
