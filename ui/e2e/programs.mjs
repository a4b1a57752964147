// The Operator page's programs (issue 29 §5; called once from dashboard.mjs, right after operator.mjs, signed
// in as the operator): a service token minted (shown once) and used by the "website" (the Go test submits
// two applications with it), the applications listed, an approval refused with the reason (this run has no
// billing provider: the approval's discount is tested against stripe-mock in httpapi), a rejection with a
// note (the store says so), the status filter, and the token revoked (it authenticates no more).
export async function run(page, { ask, shoot, consoleErrors }) {
  const tokens = page.getByRole('region', { name: 'Service tokens' })
  const apps = page.getByRole('region', { name: 'Program applications' })
  await tokens.waitFor()
  await tokens.getByLabel('Token name').fill('www.example.com')
  await tokens.getByRole('button', { name: 'Mint', exact: true }).click()
  await tokens.getByText('it is shown only now').waitFor()
  await tokens.getByRole('button', { name: 'Show Service token' }).click()
  const token = await tokens.getByRole('textbox', { name: 'Service token' }).inputValue()
  if (!/^svc_[0-9a-z]{32}$/.test(token)) throw new Error('the minted service token: ' + token)
  await tokens.getByRole('row').filter({ hasText: 'www.example.com' }).getByText('active', { exact: true }).waitFor()
  await ask('programs-submit', token) // the website submits two applications with it
  await shoot('operator-service-token')
  await tokens.getByRole('button', { name: 'Done' }).click()

  // The list was read before the website submitted: reading another status and back reads it again.
  await apps.getByLabel('Status').selectOption('')
  await apps.getByLabel('Status').selectOption('received')
  await apps.getByRole('row').filter({ hasText: 'Initech' }).waitFor()
  await apps.getByRole('row').filter({ hasText: 'Hooli' }).waitFor()
  await apps.getByRole('button', { name: 'Approve Initech' }).click()
  await apps.getByRole('heading', { name: 'Approve Initech' }).waitFor()
  await apps.getByLabel('Percent off').fill('50')
  await apps.getByLabel('Months (0: first invoice only)').fill('12')
  await apps.getByLabel('Promotion code (optional)').fill('INITECH50')
  const mark = consoleErrors.length
  await apps.getByRole('button', { name: 'Approve', exact: true }).click()
  await apps.getByText('billing is not configured on this appliance').waitFor() // no provider in this run: 409, nothing changes
  consoleErrors.splice(mark, consoleErrors.length - mark, ...consoleErrors.slice(mark).filter((e) => !/status of 409/.test(e))) // that 409, expected
  await shoot('operator-applications')
  await apps.getByRole('button', { name: 'Cancel' }).click()

  await apps.getByRole('button', { name: 'Reject Hooli' }).click()
  await apps.getByLabel('Note').fill('Not a startup any more.')
  await apps.getByRole('button', { name: 'Reject', exact: true }).click()
  await apps.getByText('Hooli: rejected').waitFor()
  await apps.getByRole('row').filter({ hasText: 'Hooli' }).waitFor({ state: 'detached' }) // no longer received
  await apps.getByRole('button', { name: 'Done' }).click()
  await apps.getByLabel('Status').selectOption('rejected')
  const rejected = apps.getByRole('row').filter({ hasText: 'Hooli' })
  await rejected.getByText('Not a startup any more.').waitFor()
  await ask('programs-rejected', 'hr@hooli.example')

  await tokens.getByRole('button', { name: 'Revoke www.example.com' }).click() // the confirmation is accepted
  await tokens.getByText('revoked', { exact: true }).waitFor()
  await ask('programs-revoked', token)
}
