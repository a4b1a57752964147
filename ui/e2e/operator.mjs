// The platform operator's page (called once from dashboard.mjs, near the end; it leaves the page signed
// in as the operator): an operator made on the machine signs in with no organization and lands on the
// organizations; creates one with a new owner (whose password shows once), suspends it with a reason
// (the store says so), resumes it, deletes it.
export async function run(page, { ask, shoot }) {
  const [email, password] = (await ask('operator')).split(' ')
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
  await page.getByLabel('Email').fill(email)
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Organizations', exact: true }).waitFor()
  const main = page.getByRole('navigation', { name: 'Main' })
  await main.getByRole('link', { name: 'Operator' }).waitFor()
  if (await main.getByRole('link', { name: 'API keys' }).count()) throw new Error('an operator in no organization is offered the API keys page')

  await page.getByLabel('Name', { exact: true }).fill('Globex')
  await page.getByLabel("Owner's email").fill('hank@globex.example')
  await page.getByRole('button', { name: 'Create', exact: true }).click()
  await page.getByRole('heading', { name: 'Globex created' }).waitFor()
  await page.getByText('Initial password', { exact: true }).waitFor()
  await shoot('operator')
  await page.getByRole('button', { name: 'Done' }).click()

  const row = page.getByRole('row').filter({ hasText: 'Globex' })
  await row.getByRole('button', { name: 'Suspend Globex' }).click()
  await page.getByRole('heading', { name: 'Suspend Globex' }).waitFor()
  await page.getByLabel('Reason').fill('unpaid invoice')
  await page.getByRole('button', { name: 'Suspend', exact: true }).click()
  await row.getByText('suspended', { exact: true }).waitFor()
  await row.getByText('unpaid invoice', { exact: true }).waitFor()
  await ask('operator-suspended', 'globex')
  await shoot('operator-suspended')
  await row.getByRole('button', { name: 'Resume Globex' }).click()
  await row.getByRole('button', { name: 'Suspend Globex' }).waitFor()
  await row.getByRole('button', { name: 'Delete Globex' }).click() // the confirmation is accepted
  await page.getByRole('row').filter({ hasText: 'Globex' }).waitFor({ state: 'detached' })
}
