// The Integrations tab (issue 30, h-integ; called once from dashboard.mjs): connect the project to deploy_a
// (a fake of Vercel's API the Go test runs, cmd/dashboard_integrations_test.go), see it connected with the
// variables pushed, which the platform has; a deployment of a branch whose preview cannot be made (the
// plan's previews limit) shows that branch with the reason; disconnect it with the confirmation, and the
// platform's variables are gone.
export async function run(page, { ask, shoot, base, prjID }) {
  const [platformProject, token] = (await ask('integrations-platform')).split(' ')
  await page.goto(base + '/projects/' + prjID + '/integrations')
  await page.getByRole('heading', { name: 'Connect a provider' }).waitFor()
  await page.getByText('No integrations.').waitFor()
  await page.getByLabel('Provider').selectOption('deploy_a')
  await page.getByLabel('Platform project ID or name', { exact: true }).fill(platformProject)
  await page.getByLabel('API token (optional)', { exact: true }).fill(token)
  await page.getByLabel('Webhook signing secret (optional)', { exact: true }).fill('e2e-webhook-secret')
  await page.getByRole('button', { name: 'Connect deploy_a', exact: true }).click()
  const card = page.getByRole('article', { name: 'Integration deploy_a' })
  await card.getByText('Connected', { exact: true }).waitFor()
  await card.getByText('DIRECT_URL').waitFor()
  if (await card.getByText(token).count()) throw new Error('the integration shows its token')
  await ask('integrations-pushed')
  await shoot('project-integrations')
  const branch = 'feature-over-limit'
  await ask('integrations-branch-failed', prjID + ' ' + branch)
  await page.reload()
  const line = card.locator('dd > div', { hasText: branch })
  await line.getByText('preview quota reached', { exact: false }).waitFor()
  await card.getByText('Connected', { exact: true }).waitFor() // production's settings did not fail
  if (await line.getByRole('link').count()) throw new Error('the failed branch links a preview')
  await line.scrollIntoViewIfNeeded()
  await shoot('project-integrations-branch-error')
  await card.getByRole('button', { name: 'Disconnect deploy_a' }).click() // dashboard.mjs accepts the confirmation
  await page.getByText('No integrations.').waitFor()
  await ask('integrations-removed')
}
