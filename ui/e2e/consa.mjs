// Issue 28's defects 1, 2, 3, 4, 5, 7, 10 and 11 in the browser. dashboard.mjs runs this near its end,
// signed in as the owner, with the project "e2e shop" active. Each defect is a step: a failing step is
// recorded and the others still run, so one run shows every defect that is back; any failure fails the run.

export async function run(page, { ask, shoot, base, out, widths, consoleErrors }) {
  const failures = []
  // CONSA_ONLY=11,2 runs only those defects' steps (to check one again, e.g. against an older build).
  const only = process.env.CONSA_ONLY ? process.env.CONSA_ONLY.split(',') : null
  const step = async (name, f) => {
    if (only && !only.includes(name.split(' ')[0])) return
    try {
      await f()
    } catch (e) {
      failures.push(`${name}: ${String(e).split('\n')[0]}`)
      await page.screenshot({ path: `${out}/consa-failed-${name.replace(/\W+/g, '-')}.png`, fullPage: true }).catch(() => {})
    }
  }
  // expectedErrors drops the browser's log lines of the error answers a step provokes on purpose (the
  // final check fails on any other console error, an uncaught rejection included).
  const expectedErrors = (from) => {
    const rest = consoleErrors.slice(from).filter((e) => !/the server responded with a status of (4\d\d|500)/.test(e))
    consoleErrors.splice(from, consoleErrors.length - from, ...rest)
    if (rest.length) throw new Error('console errors: ' + rest.join(' | '))
  }
  const fail = (msg) => { throw new Error(msg) }
  const tab = (name) => page.getByRole('navigation', { name: 'Project' }).getByRole('link', { name, exact: true }).click()
  const clipboard = () => page.evaluate(() => navigator.clipboard.readText())
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base })

  await page.goto(base + '/projects')
  await page.getByRole('link', { name: 'e2e shop' }).click()
  await page.getByRole('heading', { name: 'e2e shop' }).waitFor()
  const project = page.url()

  // 3. A secret is masked, Show shows it, Hide masks it again, Copy copies it whole without showing it: the
  // webhook signing secret and the key-value token.
  const secretField = async (label, looks) => {
    const field = page.getByLabel(label, { exact: true })
    const masked = await field.inputValue()
    if (looks.test(masked)) fail(`${label} is shown before Show: ${masked}`)
    await page.getByRole('button', { name: 'Copy ' + label }).click()
    const copied = await clipboard()
    if (!looks.test(copied)) fail(`Copy ${label} copied ${copied}`)
    if ((await field.inputValue()) !== masked || (await page.content()).includes(copied)) fail(`Copy showed ${label}`)
    await page.getByRole('button', { name: 'Show ' + label }).click()
    if ((await field.inputValue()) !== copied) fail(`Show ${label} shows ${await field.inputValue()}`)
    await page.getByRole('button', { name: 'Hide ' + label }).click()
    if ((await field.inputValue()) !== masked) fail(`Hide ${label} left ${await field.inputValue()}`)
    return copied
  }
  await step('3 webhook signing secret', async () => {
    await page.getByRole('link', { name: 'Webhooks' }).click()
    await page.getByLabel('URL').fill('https://example.com/consa-hook')
    await page.getByRole('button', { name: 'Add endpoint' }).click()
    await page.getByRole('heading', { name: /^Endpoint .* added$/ }).waitFor()
    await secretField('Signing secret', /^whsec_/)
    await shoot('consa-webhook-secret')
    await page.getByRole('button', { name: 'Done' }).click()
    await page.getByRole('button', { name: 'Delete https://example.com/consa-hook' }).click() // the dialog is accepted
    await page.getByRole('button', { name: 'Delete https://example.com/consa-hook' }).waitFor({ state: 'detached' })
  })
  await step('3 key-value token', async () => {
    await page.goto(project + '/kv')
    await page.getByRole('button', { name: 'Create key-value store' }).click()
    await page.getByRole('heading', { name: 'Key-value store created' }).waitFor()
    await secretField('Token', /^kv_[0-9a-z]{52}$/)
    await secretField('Redis URL with the token', /^rediss?:\/\/[^:]*:kv_[0-9a-z]{52}@/)
    await shoot('consa-kv-token')
    await page.getByRole('button', { name: 'Done' }).click()
  })

  // 7. The webhook form's event checkboxes are the API's EventType enum, alerts included.
  await step('7 webhook event types', async () => {
    const doc = await page.evaluate(() => fetch('/v1/openapi.json').then((r) => r.json()))
    const values = doc.components?.schemas?.EventType?.enum ?? fail('the document has no EventType enum')
    await page.getByRole('link', { name: 'Webhooks' }).click()
    const boxes = page.getByRole('group', { name: /^Events/ }).getByRole('checkbox')
    await boxes.first().waitFor()
    const names = await boxes.evaluateAll((els) => els.map((e) => e.closest('label').textContent.trim()))
    if (JSON.stringify(names) !== JSON.stringify(values)) fail(`checkboxes ${names} are not the enum ${values}`)
    for (const t of ['alert.triggered', 'alert.resolved']) await page.getByRole('checkbox', { name: t, exact: true }).waitFor({ timeout: 5000 })
  })

  // 2. The daily-backup card shows no default as if saved while its schedule loads or after an error, and
  // cannot save then; once read, it shows the saved schedule.
  await step('2 daily backup schedule', async () => {
    await page.goto(project + '/backups')
    await page.getByLabel('Hour (UTC)').fill('5')
    await page.getByLabel('Minute').fill('30')
    await page.getByLabel('Keep backups (days)').fill('14')
    await page.getByRole('button', { name: 'Save schedule' }).click()
    await page.getByRole('status').filter({ hasText: 'Schedule saved.' }).waitFor()
    const from = consoleErrors.length
    await page.route('**/scheduled-backups', (r) => r.fulfill({ status: 500, contentType: 'application/json', body: '{"error":"consa: the schedule cannot be read"}' }))
    await tab('Audit')
    await tab('Backups')
    const card = page.locator('section', { has: page.getByRole('heading', { name: 'Daily backup' }) })
    await card.getByRole('alert').filter({ hasText: 'consa: the schedule cannot be read' }).waitFor()
    const unsaved = async (when) => {
      for (const [label, dflt] of [['Hour (UTC)', '3'], ['Minute', '0'], ['Keep backups (days)', '7']]) {
        const f = card.getByLabel(label, { exact: true })
        if ((await f.count()) && (await f.inputValue()) === dflt) fail(`${when}: ${label} shows the default ${dflt}`)
      }
      if (await card.getByText('not set', { exact: true }).count()) fail(`${when}: "not set" is shown`)
      const save = card.getByRole('button', { name: 'Save schedule' })
      if ((await save.count()) && (await save.isEnabled())) fail(`${when}: Save schedule can be pressed`)
    }
    await unsaved('after an error')
    await shoot('consa-schedule-error')
    // Loading: the answer held until the card was looked at.
    await page.unroute('**/scheduled-backups')
    let release
    const held = new Promise((r) => (release = r))
    await page.route('**/scheduled-backups', async (r) => {
      await held
      await r.continue()
    })
    await tab('Audit')
    await tab('Backups')
    await card.waitFor()
    await unsaved('while loading')
    release()
    await page.waitForFunction(() => document.getElementById('sched-hour')?.value === '5', null, { timeout: 10000 }).catch(() => {})
    for (const [label, want] of [['Hour (UTC)', '5'], ['Minute', '30'], ['Keep backups (days)', '14']]) {
      const got = await card.getByLabel(label, { exact: true }).inputValue()
      if (got !== want) fail(`loaded: ${label} is ${got}, not the saved ${want}`)
    }
    await page.unroute('**/scheduled-backups')
    expectedErrors(from)
  })

  // 5. Upgrade confirm / roll back and the imports' cut over / abort ask first; their failures show on the
  // page (role=alert), never as an uncaught rejection.
  await step('5 confirmations and failures', async () => {
    const from = consoleErrors.length
    const confirmed = async (button, question, error, scope = page) => {
      const dialog = page.waitForEvent('dialog', { timeout: 5000 })
      await scope.getByRole('button', { name: button, exact: true }).click()
      const d = await dialog
      if (d.type() !== 'confirm' || !question.test(d.message())) fail(`${button}: asked ${d.type()} "${d.message()}"`)
      await scope.getByRole('alert').filter({ hasText: error }).waitFor({ timeout: 10000 })
    }
    await page.goto(project + '/settings')
    // The Upgrades card offers Confirm and Roll back only while an upgrade awaits them (ui/e2e/upgrades.mjs
    // checks that a real one's Confirm asks first); none awaits here, so none is offered.
    const upgrades = page.locator('section', { has: page.getByRole('heading', { name: 'Upgrades' }) })
    await upgrades.getByRole('heading', { name: 'Major upgrade' }).waitFor()
    if (await upgrades.getByRole('button', { name: /^(Confirm upgrade|Roll back)/ }).count()) fail('Upgrades offers Confirm or Roll back with no upgrade awaiting it')
    await shoot('consa-upgrades-idle')
    await tab('Imports')
    await confirmed('Cut over', /cut over/i, /follow|import/)
    await confirmed('Abort', /abort/i, /follow|import/)
    expectedErrors(from)
  })

  // 1. A rotation with no overlap: the Overview shows and copies the new URL without a reload, and it
  // connects; the URL shown before no longer does.
  await step('1 rotation', async () => {
    await page.goto(project)
    const field = page.getByLabel('Direct connection', { exact: true })
    await page.getByRole('button', { name: 'Show Direct connection' }).click()
    const old = await field.inputValue()
    await tab('Settings')
    await page.getByLabel('Overlap in seconds').fill('0')
    const dialog = page.waitForEvent('dialog', { timeout: 5000 }).catch(() => null)
    await page.getByRole('button', { name: 'Rotate password' }).click()
    const asked = await dialog
    await page.getByRole('status').filter({ hasText: 'Rotation' }).locator('.badge-completed').waitFor({ timeout: 60000 })
    await tab('Overview')
    await page.getByRole('button', { name: 'Show Direct connection' }).click()
    await page.waitForFunction((old) => {
      const v = document.getElementById('copy-direct-connection')?.value
      return v && v !== old && !v.includes('•')
    }, old, { timeout: 15000 })
    const fresh = await field.inputValue()
    await page.getByRole('button', { name: 'Copy Direct connection' }).click()
    if ((await clipboard()) !== fresh) fail('Copy Direct connection did not copy the URL shown')
    await ask('select1', fresh)
    if ((await ask('consa-connect', old)) !== 'refused') fail('the URL from before the rotation still connects')
    if (!asked || !/rotate/i.test(asked.message())) fail('Rotate password did not ask first')
    await shoot('consa-rotated')
  })

  // 4. A claim link opened without its #token=: the page takes the token (or the whole link) pasted.
  await step('4 claim by pasting the link', async () => {
    const claimPath = await ask('ephemeral')
    await page.goto(base + claimPath.split('#')[0])
    await page.getByRole('heading', { name: 'Claim a database' }).waitFor()
    await page.getByLabel(/Claim token or link/).fill(base + claimPath, { timeout: 10000 })
    await page.getByRole('button', { name: 'Use this token' }).click()
    await page.locator('.facts .badge-active').waitFor({ timeout: 30000 })
    await shoot('consa-claim-pasted')
    await page.getByRole('button', { name: /^Claim into/ }).click()
    await page.getByRole('heading', { name: 'claimed scratch' }).waitFor()
  })

  // 11. A member sees no admin-only form (New project, Delete, Restore, the forced minor upgrade, the
  // schedule's Save, imports): each says who can do it instead.
  await step('11 member', async () => {
    await page.getByRole('link', { name: 'Members' }).click()
    await page.getByLabel('Email').fill('consa-member@example.com')
    await page.getByLabel('Name').fill('Consa Member')
    await page.getByRole('button', { name: 'Add', exact: true }).click()
    // The answer shows the password masked (step 3's rule): wait for its panel, then Show (counting the
    // button before the answer arrived raced with it on a loaded machine).
    await page.getByRole('button', { name: 'Show Initial password' }).click()
    const password = await page.getByLabel('Initial password', { exact: true }).inputValue()
    await page.getByRole('button', { name: 'Done' }).click()
    const ctx = await page.context().browser().newContext({ ignoreHTTPSErrors: true, viewport: widths.desktop })
    const m = await ctx.newPage()
    try {
      await m.goto(base + '/projects')
      await m.getByLabel('Email').fill('consa-member@example.com')
      await m.getByLabel('Password').fill(password)
      await m.getByRole('button', { name: 'Sign in' }).click()
      await m.getByRole('heading', { name: 'Projects' }).waitFor()
      await m.getByRole('link', { name: 'e2e shop' }).waitFor()
      const absent = async (where, what) => {
        if (await what.count()) fail(`${where}: a member sees ${what}`)
      }
      await m.getByText('Only an owner or an admin of the organization can create projects.').waitFor({ timeout: 5000 })
      await absent('projects', m.getByRole('button', { name: 'Create project' }))
      await m.screenshot({ path: `${out}/consa-member-projects-desktop.png`, fullPage: true })
      await m.getByRole('link', { name: 'e2e shop' }).click()
      await m.getByRole('heading', { name: 'e2e shop' }).waitFor()
      await m.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Settings' }).click()
      await m.getByRole('heading', { name: 'Upgrades' }).waitFor()
      await m.getByText('Only an owner or an admin of the organization can delete the project.').waitFor({ timeout: 5000 })
      await absent('settings', m.getByRole('button', { name: 'Delete project' }))
      await absent('settings', m.getByRole('checkbox', { name: 'even with sessions open' }))
      await m.screenshot({ path: `${out}/consa-member-settings-desktop.png`, fullPage: true })
      await m.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Backups' }).click()
      await m.getByRole('heading', { name: 'Daily backup' }).waitFor()
      await m.getByText('Only an owner or an admin of the organization can restore the project.').waitFor({ timeout: 5000 })
      await absent('backups', m.getByRole('button', { name: 'Restore', exact: true }))
      await absent('backups', m.getByRole('button', { name: 'Save schedule' }))
      await m.waitForFunction(() => document.getElementById('sched-hour')?.value === '5', null, { timeout: 5000 }) // the schedule, read-only
      await m.screenshot({ path: `${out}/consa-member-backups-desktop.png`, fullPage: true })
      await m.getByRole('navigation', { name: 'Project' }).getByRole('link', { name: 'Imports' }).click()
      await m.getByText('Only an owner or an admin of the organization can import into the project.').waitFor({ timeout: 5000 })
      await absent('imports', m.getByRole('button', { name: 'Upload', exact: true }))
      await absent('imports', m.getByRole('button', { name: 'Cut over', exact: true }))
    } catch (e) {
      await m.screenshot({ path: `${out}/consa-failed-11-member-view.png`, fullPage: true }).catch(() => {})
      throw e
    } finally {
      await ctx.close()
    }
  })

  // 10. The CLI login page shows the code the CLI printed; Refuse refuses it on the server: the CLI stops
  // with "refused", and the login can no longer be approved.
  await step('10 CLI login refused', async () => {
    const [session, code] = (await ask('consa-cli-login')).split(' ')
    await page.goto(base + '/cli/login/' + session)
    await page.getByRole('heading', { name: 'Approve a CLI login' }).waitFor()
    await page.getByText(code, { exact: true }).waitFor({ timeout: 5000 })
    await shoot('consa-cli-login-code')
    await page.getByRole('button', { name: 'Refuse' }).click()
    await page.getByRole('status').filter({ hasText: 'Refused' }).waitFor()
    const verdict = await ask('consa-cli-refused', session)
    if (verdict !== 'refused') fail(verdict)
    await page.reload()
    await page.getByText('refused', { exact: true }).waitFor({ timeout: 5000 })
    if (await page.getByRole('button', { name: 'Approve' }).count()) fail('a refused login can still be approved on the page')
  })

  if (failures.length) throw new Error('consa: ' + failures.join(' | '))
}
