// Plans, quotas and the organization's billing status (issue 29 §3–4; called once from dashboard.mjs,
// right after operator.mjs, which leaves the page signed in as the operator on the Operator page; this
// leaves it there too). As the organization's owner first: the Overview's billing card says billing is
// not configured, then (the store given what a Stripe webhook sets) shows status, plan and period end.
// As the operator: each organization's usage against its quota; the quota of one edited; a plan edited.
export async function run(page, { ask, shoot }) {
  const origin = new URL(page.url()).origin
  // A member's Overview: billing not configured, then configured.
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
  const [memberEmail, memberPassword] = (await ask('plans-member')).split(' ')
  await page.getByLabel('Email').fill(memberEmail)
  await page.getByLabel('Password').fill(memberPassword)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Overview' }).click()
  const billing = page.getByRole('region', { name: 'Billing' })
  await billing.getByText('Billing is not configured on this appliance').waitFor()
  await ask('plans-billing', 'on')
  await page.goto(origin + '/overview')
  await billing.getByText('active', { exact: true }).waitFor()
  await billing.getByText('pro', { exact: true }).waitFor()
  await billing.getByText('cus_e2e', { exact: false }).waitFor()
  await billing.scrollIntoViewIfNeeded()
  await shoot('org-billing')
  await ask('plans-billing', 'off')

  // An operator: usage and quotas, then the plans.
  const [email, password] = (await ask('plans-operator')).split(' ')
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
  await page.getByLabel('Email').fill(email)
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Organizations', exact: true }).waitFor()
  const row = page.getByRole('row').filter({ hasText: 'Default organization' })
  await row.getByText(/\/ 20 projects/).waitFor()
  await row.getByText(/\/ 200\.0 GiB/).waitFor()
  await row.getByRole('button', { name: 'Quota of Default organization' }).click()
  await page.getByRole('heading', { name: 'Quota of Default organization' }).waitFor()
  await page.getByLabel('Projects', { exact: true }).fill('7')
  await page.getByLabel('Storage (MiB)').fill('10240')
  await page.getByRole('button', { name: 'Save quota' }).click()
  await row.getByText(/\/ 7 projects/).waitFor()
  await row.getByText(/\/ 10\.0 GiB/).waitFor()
  await ask('plans-quota')

  const plans = page.getByRole('region', { name: 'Plans' })
  const pro = plans.getByRole('row').filter({ hasText: /^pro/ })
  await pro.getByRole('button', { name: 'Edit plan pro' }).click()
  await plans.getByRole('heading', { name: 'Edit plan pro' }).waitFor()
  await plans.getByLabel('Connections').fill('150')
  await plans.getByRole('button', { name: 'Save plan' }).click()
  await plans.getByText(/Plan pro saved; \d+ project job\(s\) apply it\./).waitFor()
  await pro.getByRole('cell', { name: '150', exact: true }).waitFor()
  await ask('plans-plan')
  await shoot('operator-plans')
}
