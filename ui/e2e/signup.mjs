// Sign-up and referrals (issue 29 §2, §5; called once from dashboard.mjs near the end, after operator.mjs,
// signed in as the operator; it leaves the page signed in as another operator). With sign-up by invite,
// the operator mints an invite on the Operator page; Initech signs up through its link (the invite filled
// in), makes its referral code on its Overview and copies the sign-up link. With sign-up open, Hooli signs
// up through that link (the code filled in: the Go side finds the pending referral); Pied Piper signs up
// from the sign-in page's link with an unknown code (it still signs up; the page says the code is not
// valid); Initech's Overview lists its referral. Initech's owner mints a sign-up invite on its Overview's
// Sign-up invites card (the Go side finds it filed under Initech); an operator sees the referral on the
// Operator page.
export async function run(page, { ask, shoot, base }) {
  const password = 'a long enough password'
  const signOut = async () => {
    await page.getByRole('button', { name: 'Sign out' }).click()
    await page.getByRole('heading', { name: 'Sign in to the appliance' }).waitFor()
  }
  const signUp = async (email, org) => {
    await page.getByRole('heading', { name: 'Create your organization' }).waitFor()
    await page.getByLabel('Email').fill(email)
    await page.getByLabel('Password').fill(password)
    await page.getByLabel('Organization name').fill(org)
    await page.getByRole('button', { name: 'Sign up' }).click()
  }
  const overview = async (name) => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Overview' }).click()
    await page.getByRole('heading', { name, level: 1 }).waitFor()
    await page.getByRole('heading', { name: 'Referrals', exact: true }).waitFor()
  }

  await ask('signup-mode', 'invite')
  await page.goto(base + '/operator')
  await page.getByRole('heading', { name: 'Sign-up invites' }).waitFor()
  await page.getByText('Sign-up on this appliance is by invite').waitFor()
  await page.getByLabel('For (email, optional)').fill('ines@initech.example')
  await page.getByLabel('Note', { exact: true }).fill('Initech trial')
  await page.getByRole('button', { name: 'Create invite' }).click()
  const invite = await page.getByRole('textbox', { name: 'Invite link' }).inputValue()
  if (!/\/signup\?invite=sgi_/.test(invite)) throw new Error('invite link ' + invite)
  await page.getByRole('row').filter({ hasText: 'Initech trial' }).getByText('pending', { exact: true }).waitFor()
  await shoot('signup-invites')
  await signOut()
  await page.getByText('with the invite link an operator sent you').waitFor()
  const iu = new URL(invite)
  await page.goto(base + iu.pathname + iu.search)
  if ((await page.getByLabel('Invite', { exact: true }).inputValue()) !== iu.searchParams.get('invite')) throw new Error('the invite is not filled in from ?invite=')
  await signUp('ines@initech.example', 'Initech')
  await page.getByRole('heading', { name: 'Projects', level: 1 }).waitFor()
  await overview('Initech')
  await page.getByRole('button', { name: 'Create a referral code' }).click()
  const code = (await page.locator('.referral-code').textContent()).trim()
  const link = await page.getByRole('textbox', { name: 'Sign-up link' }).inputValue()
  if (!/^[0-9A-Z]{8}$/.test(code) || !link.endsWith('/signup?ref=' + code)) throw new Error(`referral code ${code}, link ${link}`)
  await page.getByText('No organization signed up with your code yet.').waitFor()
  await shoot('referral-code')

  await ask('signup-mode', 'open')
  await signOut()
  const u = new URL(link)
  await page.goto(base + u.pathname + u.search) // the link as copied, on the address the browser reaches
  await page.getByRole('heading', { name: 'Create your organization' }).waitFor()
  if ((await page.getByLabel('Referral code (optional)').inputValue()) !== code) throw new Error('the referral code is not filled in from ?ref=')
  await shoot('signup')
  await signUp('jo@hooli.example', 'Hooli')
  await page.getByRole('heading', { name: 'Projects', level: 1 }).waitFor()
  await ask('signup-referral', 'hooli')

  await signOut()
  await page.getByRole('link', { name: 'Create an organization' }).click()
  await page.getByLabel('Referral code (optional)').fill('NOSUCHCODE')
  await signUp('kim@piedpiper.example', 'Pied Piper')
  await page.getByRole('heading', { name: 'Welcome to Pied Piper' }).waitFor()
  await page.getByRole('alert').filter({ hasText: 'The referral code NOSUCHCODE is not valid' }).waitFor()
  await shoot('signup-invalid-code')
  await page.getByRole('button', { name: 'Continue' }).click()
  await page.getByRole('heading', { name: 'Projects', level: 1 }).waitFor()

  await signOut()
  await page.getByLabel('Email').fill('ines@initech.example')
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Projects', level: 1 }).waitFor()
  await overview('Initech')
  const row = page.getByRole('region', { name: 'Referrals' }).getByRole('row').filter({ hasText: 'pending' })
  await row.waitFor()
  await shoot('referrals')

  // The owner's sign-up invites.
  const invites = page.getByRole('region', { name: 'Sign-up invites' })
  await invites.getByText('gets an organization of their own').waitFor()
  await invites.getByLabel('Note', { exact: true }).fill('for a friend')
  await invites.getByRole('button', { name: 'Create invite' }).click()
  const ownerInvite = await invites.getByRole('textbox', { name: 'Invite link' }).inputValue()
  if (!/\/signup\?invite=sgi_/.test(ownerInvite)) throw new Error("the owner's invite link " + ownerInvite)
  await invites.getByRole('row').filter({ hasText: 'for a friend' }).getByText('pending', { exact: true }).waitFor()
  await ask('signup-owner-invite', 'for a friend')
  await invites.scrollIntoViewIfNeeded()
  await shoot('owner-signup-invites')

  // The operators' referrals: Hooli's, by Initech's code.
  const [email, opPassword] = (await ask('signup-operator')).split(' ')
  await signOut()
  await page.getByLabel('Email').fill(email)
  await page.getByLabel('Password').fill(opPassword)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Organizations', exact: true }).waitFor()
  await page.goto(base + '/operator')
  const refs = page.getByRole('region', { name: 'Referrals' })
  await refs.getByRole('row').filter({ hasText: 'pending' }).waitFor()
  await refs.getByLabel('Status').selectOption('void')
  await refs.getByText('No referrals void.').waitFor()
  await refs.getByLabel('Status').selectOption('pending')
  await refs.getByRole('row').filter({ hasText: 'pending' }).waitFor()
  await refs.scrollIntoViewIfNeeded()
  await shoot('operator-referrals')
}
