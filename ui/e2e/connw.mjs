// Issue 28 §3.6 and §3.7 in the browser: the connection widget (pick a database, a role, pooled or direct;
// copy a snippet; the CA next to it) and the Databases & roles tab (create a database and a role, reset
// the role's password, drop the database). dashboard.mjs runs this near its end, signed in as the owner,
// with the project "e2e shop" active. The Go side answers "consa-connect" (connects or refused).

export async function run(page, { ask, shoot, base, consoleErrors }) {
  const fail = (msg) => {
    throw new Error('connw: ' + msg)
  }
  const tab = (name) => page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name, exact: true }).click()
  const clipboard = () => page.evaluate(() => navigator.clipboard.readText())
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base })
  const connects = async (url) => (await ask('consa-connect', url)) === 'connects'

  await page.goto(base + '/projects')
  await page.getByRole('link', { name: 'e2e shop' }).click()
  await page.getByRole('heading', { name: 'e2e shop' }).waitFor()
  const project = page.url()

  // The Databases & roles tab: a database and a role.
  await tab('Databases & roles')
  await page.getByRole('heading', { name: 'Databases' }).waitFor()
  await page.getByLabel('Database name').fill('e2e_reports')
  await page.getByRole('button', { name: 'Create database' }).click()
  await page.getByRole('cell', { name: 'e2e_reports', exact: true }).waitFor()
  // A reserved name is refused with the server's message, and nothing is created.
  const from = consoleErrors.length
  await page.getByLabel('Database name').fill('template1')
  await page.getByRole('button', { name: 'Create database' }).click()
  await page.getByRole('alert').filter({ hasText: 'reserved' }).waitFor()
  // The browser logs the 400 this refusal is: expected, so dropped from the run's console errors.
  const rest = consoleErrors.slice(from).filter((e) => !/status of 400/.test(e))
  consoleErrors.splice(from, consoleErrors.length - from, ...rest)
  await page.getByLabel('Role name').fill('e2e_reader')
  await page.getByRole('button', { name: 'Create role' }).click()
  const pwField = page.getByLabel('Password of e2e_reader', { exact: true })
  await pwField.waitFor()
  if (!/^•+$/.test(await pwField.inputValue())) fail('the new role’s password is shown before Show')
  await page.getByRole('button', { name: 'Copy Password of e2e_reader' }).click()
  const first = await clipboard()
  if (!/^[0-9a-z]{20,}$/.test(first)) fail('copied password ' + first)
  await shoot('connw-role-created')
  await page.getByRole('button', { name: 'Done' }).click()
  await page.getByRole('cell', { name: 'e2e_reader', exact: true }).waitFor()

  // Reset: a new password shown once; the old one is refused, the new one connects (through the pooler).
  await page.getByRole('button', { name: 'Reset password of e2e_reader' }).click() // the dialog is accepted
  await page.getByRole('heading', { name: /New password for/ }).waitFor()
  await page.getByRole('button', { name: 'Copy Password of e2e_reader' }).click()
  const second = await clipboard()
  if (!second || second === first) fail('the reset gave no new password')
  await page.getByRole('button', { name: 'Done' }).click()

  // The connection widget on the Overview: pick the new database, pooled; its URL connects.
  await page.goto(project)
  await page.getByRole('heading', { name: 'Connect' }).waitFor()
  await page.getByLabel('Database', { exact: true }).selectOption('e2e_reports')
  await page.getByRole('button', { name: 'Pooled', exact: true }).click()
  const pooledLabel = 'Pooled connection (PgBouncer, transaction mode)'
  const urlField = page.getByLabel(pooledLabel, { exact: true })
  if (!(await urlField.inputValue()).includes('••••••@')) fail('the pooled URL shows its password before Show')
  await page.getByRole('button', { name: 'Show ' + pooledLabel }).click()
  const pooled = await urlField.inputValue()
  if (!/\/e2e_reports\?/.test(pooled)) fail('the pooled URL does not name the picked database: ' + pooled.replace(/:[^:@]*@/, ':…@'))
  if (!(await connects(pooled))) fail('the pooled URL of the new database does not connect')
  await page.getByRole('button', { name: 'Direct', exact: true }).click() // still shown (Show is the field's, not the URL's)
  const direct = await page.getByLabel('Direct connection', { exact: true }).inputValue()
  if (!/\/e2e_reports\?/.test(direct) || direct === pooled || !(await connects(direct))) fail('the direct URL of the new database does not connect')
  await page.getByRole('button', { name: 'Pooled', exact: true }).click()
  // A snippet: Node pg, copied whole (the password in it masked on the page), the CA next to it.
  await page.getByRole('button', { name: 'Node (pg)' }).click()
  const snippet = page.getByLabel('Node (pg) snippet', { exact: true })
  const password = new URL(pooled).password
  if ((await snippet.inputValue()).includes(password)) fail('the snippet shows the password before Show')
  await page.getByRole('button', { name: 'Copy Node (pg) snippet' }).click()
  const code = await clipboard()
  const port = new URL(pooled).port
  for (const want of [`port: ${port},`, 'database: "e2e_reports"', `password: "${decodeURIComponent(password)}"`, 'fs.readFileSync("appliance-ca.crt"']) {
    if (!code.includes(want)) fail('the Node snippet lacks ' + want.replace(password, '…'))
  }
  const ca = page.getByRole('link', { name: /Download the CA certificate/ })
  if ((await ca.getAttribute('href')) !== '/v1/ca.crt' || (await ca.getAttribute('download')) !== 'appliance-ca.crt') fail('the CA link')
  const pem = await page.evaluate(async () => (await fetch('/v1/ca.crt')).text())
  if (!pem.startsWith('-----BEGIN CERTIFICATE-----')) fail('the CA download is not a PEM certificate')
  await page.getByRole('button', { name: 'Hide ' + pooledLabel }).click()
  await page.getByRole('button', { name: 'psql' }).click()
  await shoot('connw-connect')
  // Another role: its password is not known to the page, the snippet says where it goes; with the reset
  // password in its place, the URL connects.
  await page.getByLabel('Role', { exact: true }).selectOption('e2e_reader')
  await page.getByText('put it in place of YOUR_PASSWORD').waitFor()
  await page.getByRole('button', { name: 'Python (psycopg)' }).click()
  const py = await page.getByLabel('Python (psycopg) snippet', { exact: true }).inputValue()
  if (!py.includes('user="e2e_reader"') || !py.includes('prepare_threshold=None') || !py.includes('sslrootcert="appliance-ca.crt"')) fail('the psycopg snippet: ' + py)
  await shoot('connw-connect-role')
  // e2e_reader connects to the project's database (the new one is its owner's): with the reset password in
  // place of YOUR_PASSWORD it connects, with the first one it is refused.
  const own = await page.getByLabel('Database', { exact: true }).locator('option').first().getAttribute('value')
  await page.getByLabel('Database', { exact: true }).selectOption(own)
  const readerURL = await urlField.inputValue()
  if (!readerURL.includes('e2e_reader:YOUR_PASSWORD@')) fail('the role’s URL: ' + readerURL)
  if (await connects(readerURL.replace('YOUR_PASSWORD', first))) fail('the password from before the reset still connects')
  if (!(await connects(readerURL.replace('YOUR_PASSWORD', second)))) fail('the reset password does not connect through the pooler')

  // Drop the database: gone from the list and from the picker.
  await tab('Databases & roles')
  await page.getByRole('button', { name: 'Drop e2e_reports' }).click() // the dialog is accepted
  await page.getByRole('cell', { name: 'e2e_reports', exact: true }).waitFor({ state: 'detached' })
  await shoot('connw-databases')
  // (PgBouncer still accepts a login to it, and fails its first statement: the server has no such database.)
  if (await connects(direct)) fail('the dropped database still connects')
}
