// Issue 28 §1, defects 6, 8, 9, 12, 13 and 14 in the browser: the table layout on a phone, the table
// editor's keyboard and errors, accessibility (dark mode through axe, titles, skip link, focus), the
// assets' encoding and chunks, and the smaller items (job results, plurals, the cutover's name, the
// audit's names, who is signed in, the default environment and backup schedule, one "connection lost").
// dashboard.mjs calls run once near its end, signed in, after the e2e shop project went through every tab.
// Every check runs and the failures are reported together, so one run shows all that is wrong.

const phone = { width: 390, height: 844 }
const desktop = { width: 1280, height: 800 }

export async function run(page, { base, shoot, axe, consoleErrors }) {
  const failures = []
  const check = (ok, what) => {
    if (!ok) {
      failures.push(what)
      console.log('consb: ' + what) // the Go test logs it at once
    }
  }
  const soft = async (name, f) => {
    try {
      await f()
    } catch (e) {
      check(false, `${name}: ${String(e).split('\n')[0]}`)
    }
  }
  // expected drops the browser's logs of the error answers a step asks for on purpose, since mark.
  const expected = (mark, re) => consoleErrors.splice(mark, consoleErrors.length - mark, ...consoleErrors.slice(mark).filter((e) => !re.test(e)))
  // A step that does not happen fails in seconds, not the default 30 (every step runs).
  page.setDefaultTimeout(10000)
  const project = () => page.getByRole('navigation', { name: 'Project' })
  const dark = async (name) => {
    await page.emulateMedia({ colorScheme: 'dark' })
    await axe(name + ' (dark)')
    await page.emulateMedia({ colorScheme: 'light' })
  }
  // noOverflow: at phone width the page does not scroll sideways, and no <td> is anything but a cell.
  const layout = async (name) => {
    await page.setViewportSize(phone)
    const r = await page.evaluate(() => ({
      scroll: document.scrollingElement.scrollWidth,
      inner: window.innerWidth,
      flexCells: [...document.querySelectorAll('td')].filter((td) => !['table-cell', 'none'].includes(getComputedStyle(td).display)).length,
      // what sticks out (the outermost elements past the edge), to say why
      wide: [...document.body.querySelectorAll('*')]
        .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 0.5 && !(e.parentElement && e.parentElement.getBoundingClientRect().right > window.innerWidth + 0.5))
        .slice(0, 6)
        .map((e) => `${e.tagName.toLowerCase()}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`),
    }))
    check(r.scroll <= r.inner, `${name}: the page is ${r.scroll} px wide on a ${r.inner} px phone (${r.wide.join(', ')})`)
    check(r.flexCells === 0, `${name}: ${r.flexCells} <td> are not table cells (display:flex on a cell)`)
    await page.setViewportSize(desktop)
  }

  const me = await page.evaluate(() => fetch('/v1/me', { headers: { 'X-Appliance-CSRF': '1' } }).then((r) => r.json()))
  const projects = await page.evaluate(() => fetch('/v1/projects', { headers: { 'X-Appliance-CSRF': '1' } }).then((r) => r.json()))
  const shop = projects.projects.find((p) => p.name === 'e2e shop')

  // 14: /v1/me says who is signed in, and the header shows it.
  await soft('who is signed in', async () => {
    check(me.user && me.user.email === process.env.EMAIL, `/v1/me answers no user email: ${JSON.stringify(me.user)}`)
    const who = (await page.locator('header').innerText()).includes(me.user?.name || me.user?.email || '¤')
    check(who, 'the header does not say who is signed in')
  })
  // 14: the one default environment (the form sent none), and a production project's daily backup.
  await soft('defaults', async () => {
    check(shop.environment === 'production', `the project made with the form's default is ${shop.environment}`)
    const s = await page.evaluate((id) => fetch(`/v1/projects/${id}/scheduled-backups`, { headers: { 'X-Appliance-CSRF': '1' } }).then((r) => r.json()), shop.id)
    check(s.scheduled_backups?.length === 1 && s.scheduled_backups[0].is_active, `the production project has no daily backup: ${JSON.stringify(s)}`)
  })

  // 13: the main chunk is small, sent compressed, and uPlot and the API reference are not in it.
  await soft('assets', async () => {
    await page.goto(base + '/projects')
    await page.getByRole('heading', { name: 'Projects', exact: true }).waitFor()
    const main = await page.evaluate(async () => {
      const r = await fetch(document.querySelector('script[type=module]').src, { cache: 'no-store' })
      return { encoding: r.headers.get('content-encoding'), vary: r.headers.get('vary'), bytes: (await r.arrayBuffer()).byteLength }
    })
    check(main.encoding === 'br' && main.vary === 'Accept-Encoding', `the main script is not sent compressed: ${JSON.stringify(main)}`)
    check(main.bytes < 80000, `the main script is ${main.bytes} bytes`)
    const loaded = await page.evaluate(() => [...performance.getEntriesByType('resource').map((e) => e.name), ...[...document.querySelectorAll('script[src], link[href]')].map((e) => e.src || e.href)])
    check(!loaded.some((u) => /\/assets\/(monitoring|docs)-/.test(u)), `the projects page loads ${loaded.filter((u) => u.includes('/assets/')).join(', ')}`)
  })

  // 12: a skip link first; it moves the focus to the page's heading. A route change moves the focus too.
  await soft('skip link', async () => {
    await page.keyboard.press('Tab')
    const first = await page.evaluate(() => document.activeElement?.textContent)
    check(first === 'Skip to content', `the first Tab is on ${first}`)
    await page.keyboard.press('Enter')
    await page.waitForFunction(() => document.activeElement?.tagName === 'H1')
    check((await page.evaluate(() => document.activeElement?.textContent)) === 'Projects', 'the skip link does not reach the heading')
  })
  await soft('titles and focus', async () => {
    check((await page.title()) === 'Projects — Appliance', `the projects page's title: ${await page.title()}`)
    await page.getByRole('link', { name: 'e2e shop' }).click()
    await page.getByRole('heading', { name: 'e2e shop' }).waitFor()
    await page.waitForFunction(() => document.activeElement?.tagName === 'H1', null, { timeout: 5000 })
    check((await page.title()) === 'e2e shop — Appliance', `the project's title: ${await page.title()}`)
    await project().getByRole('link', { name: 'Tables' }).click()
    await page.waitForFunction(() => document.title.startsWith('Tables'), null, { timeout: 5000 })
    check((await page.title()) === 'Tables · e2e shop — Appliance', `the tab's title: ${await page.title()}`)
  })
  await soft('focus ring of the tabs', async () => {
    // Reached by the keyboard (the ring is :focus-visible's): Tab from the tab before it.
    await project().getByRole('link', { name: 'Overview' }).focus()
    await page.keyboard.press('Tab')
    const tab = project().getByRole('link', { name: 'SQL' })
    const r = await tab.evaluate((a) => {
      if (a !== document.activeElement) return { focused: false }
      const nav = a.closest('nav')
      const clip = nav.getBoundingClientRect() // the scroller clips to its padding box
      const ns = getComputedStyle(nav)
      const box = a.getBoundingClientRect()
      const s = getComputedStyle(a)
      const out = parseFloat(s.outlineWidth) + parseFloat(s.outlineOffset)
      return {
        top: box.top - out >= clip.top + parseFloat(ns.borderTopWidth) - 0.5,
        bottom: box.bottom + out <= clip.bottom - parseFloat(ns.borderBottomWidth) + 0.5,
        style: s.outlineStyle,
      }
    })
    check(r.style !== 'none' && r.top && r.bottom, `the focus ring of a tab is clipped by the tab bar: ${JSON.stringify(r)}`)
  })

  // 9: the table editor. The table list has the project's tables, not an extension's views.
  const patches = []
  const onRequest = (r) => r.method() === 'PATCH' && r.url().includes('/rows') && patches.push(r.url())
  page.on('request', onRequest)
  await soft('table editor', async () => {
    await page.getByLabel('Table', { exact: true }).selectOption('public.todo')
    await page.getByRole('cell', { name: 'edited in the grid', exact: true }).waitFor()
    const options = await page.locator('#studio-table option').allInnerTexts()
    check(!options.some((o) => o.includes('pg_stat_statements')), `the table list has ${options.join(', ')}`)
    // Enter on Edit, then Enter with nothing changed: no request, the row is left.
    await page.getByRole('button', { name: 'Edit row 1', exact: true }).focus()
    await page.keyboard.press('Enter')
    const title = page.getByLabel('title of row 1', { exact: true })
    await title.waitFor()
    check((await page.getByLabel('id of row 1', { exact: true }).count()) === 0, 'the primary key is editable in place')
    check(await title.evaluate((el) => el === document.activeElement), 'Edit does not put the focus in the row')
    await page.keyboard.press('Enter')
    await title.waitFor({ state: 'detached', timeout: 3000 })
    check(patches.length === 0, `Enter with nothing changed sent ${patches.length} requests`)
    // Escape cancels.
    await page.getByRole('button', { name: 'Edit row 1', exact: true }).click()
    await title.fill('not saved')
    await title.press('Escape')
    await title.waitFor({ state: 'detached', timeout: 3000 })
    check(patches.length === 0, 'Escape sent the row')
    // An error does not outlive Cancel.
    const mark = consoleErrors.length
    await page.getByRole('button', { name: 'Edit row 1', exact: true }).click()
    await title.fill('')
    await page.getByRole('button', { name: 'Save', exact: true }).click()
    const error = page.locator('section.card').getByRole('alert').filter({ hasText: 'null' })
    await error.first().waitFor()
    await page.getByRole('button', { name: 'Cancel', exact: true }).click()
    await error.first().waitFor({ state: 'detached', timeout: 3000 })
    expected(mark, /status of 400/)
  })
  page.off('request', onRequest)
  // 8, 12: the Tables tab on a phone; dark mode.
  await soft('tables layout', async () => {
    await layout('tables')
    await dark('project-tables')
  })

  // 14: a 1-row result says "1 row", in the result and the history.
  await soft('plural', async () => {
    await project().getByRole('link', { name: 'SQL' }).click()
    const editor = page.getByRole('textbox', { name: 'Query' })
    await editor.click() // typed as sqleditor.mjs does (fill restyles inline, which the CSP refuses)
    await page.keyboard.press('Control+a')
    await page.keyboard.press('Backspace')
    await page.keyboard.insertText('SELECT 1 AS one')
    await page.keyboard.press('Escape')
    await page.getByRole('button', { name: 'Run', exact: true }).click()
    await page.getByRole('region', { name: 'Statement 1 of 1' }).getByText(/^1 row$/).waitFor()
    await page.locator('.history li').filter({ hasText: 'SELECT 1 AS one' }).getByText(/· 1 row$/).waitFor()
    check(!(await page.content()).includes('1 rows'), 'the page says "1 rows"')
  })

  // 14: a finished job's result in words and local times (the rotation's: previous_expires_at …).
  await soft('job result', async () => {
    await project().getByRole('link', { name: 'Settings' }).click()
    await page.getByRole('button', { name: 'Rotate password' }).click()
    const result = page.locator('.job-result')
    await result.waitFor({ timeout: 60000 })
    const terms = await result.locator('dt').allInnerTexts()
    const values = await result.locator('dd').allInnerTexts()
    check(terms.length > 0 && terms.every((t) => !t.includes('_') && t[0] === t[0].toUpperCase()), `job result labels: ${terms.join(', ')}`)
    check(!values.some((v) => /^\d{4}-\d\d-\d\dT/.test(v)), `job result values: ${values.join(', ')}`)
  })

  // 14: the completed cutover keeps its preview's name.
  await soft('cutover name', async () => {
    await project().getByRole('link', { name: 'Previews' }).click()
    const rows = page.locator('section', { has: page.getByRole('heading', { name: 'Cutover requests' }) }).getByRole('row')
    await rows.locator('.badge-completed').first().waitFor()
    check((await rows.filter({ has: page.locator('.badge-completed') }).first().innerText()).includes('e2e preview'), 'the completed cutover lost its preview\'s name')
    await layout('previews')
  })

  // 14: the audit names people, not IDs.
  await soft('audit names', async () => {
    await project().getByRole('link', { name: 'Audit' }).click()
    await page.getByRole('heading', { name: 'Audit events', exact: true }).waitFor()
    await page.getByRole('cell', { name: new RegExp(process.env.EMAIL.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')) }).first().waitFor()
    check(!(await page.locator('main table').innerText()).includes('usr_'), 'the audit shows user IDs')
    await dark('project-audit')
  })

  // 8, 12: the webhook deliveries on a phone (actions inside the card), the payload reachable by keyboard.
  await soft('webhooks', async () => {
    await page.getByRole('link', { name: 'Webhooks' }).click()
    await page.getByRole('heading', { name: 'Webhooks' }).waitFor()
    await page.getByRole('button', { name: /^Deliveries of / }).first().click()
    const deliveries = page.getByRole('region', { name: /^Deliveries to / })
    await deliveries.getByRole('button', { name: /^Details of / }).first().click()
    const payload = deliveries.locator('pre.payload').first()
    await payload.waitFor()
    check((await payload.getAttribute('tabindex')) === '0' && !!(await payload.getAttribute('aria-label')), 'the payload is not reachable by keyboard')
    await page.setViewportSize(phone)
    const clipped = await deliveries.evaluate((card) => {
      const edge = card.getBoundingClientRect().right
      const past = (e) => e.getBoundingClientRect().right > Math.min(edge, window.innerWidth) + 0.5
      return [...card.querySelectorAll('button')].filter(past).map((b) => b.textContent).concat(
        [...card.querySelectorAll('*')].filter((e) => past(e) && !past(e.parentElement)).slice(0, 4).map((e) => `(${e.tagName.toLowerCase()}.${e.className} ${Math.round(e.getBoundingClientRect().width)} px)`))
    })
    check(clipped.length === 0, `webhook delivery actions clipped on a phone: ${clipped.join(', ')}`)
    await shoot('consb-webhooks')
    await layout('webhooks')
    await dark('webhooks')
  })

  // 12: a project that does not exist has a heading, and a title.
  await soft('not found', async () => {
    const mark = consoleErrors.length
    await page.goto(base + '/projects/prj_nothere')
    await page.getByRole('heading', { level: 1 }).waitFor()
    check((await page.title()).endsWith('— Appliance') && (await page.title()) !== 'Appliance', `the missing project's title: ${await page.title()}`)
    await dark('project-not-found')
    expected(mark, /status of 404/)
    await page.goto(base + '/projects')
    await page.getByRole('heading', { name: 'Projects', exact: true }).waitFor()
    await dark('projects')
  })

  // 14: with the appliance unreachable, one banner, not an error per card; it goes when it answers again.
  await soft('connection lost', async () => {
    const before = consoleErrors.length
    await page.route('**/v1/**', (r) => r.abort('internetdisconnected'))
    await page.getByRole('link', { name: 'e2e shop' }).click()
    const banner = page.getByRole('alert').filter({ hasText: 'Connection to the appliance lost' })
    await banner.waitFor({ timeout: 10000 })
    await page.getByRole('link', { name: 'Overview' }).first().click()
    await page.getByRole('heading', { name: 'Overview', exact: true }).waitFor().catch(() => {})
    check((await banner.count()) === 1, `${await banner.count()} connection banners`)
    const perCard = await page.getByText('does not answer').count()
    check(perCard === 0, `${perCard} cards say the appliance does not answer`)
    await shoot('consb-connection-lost')
    await page.unroute('**/v1/**')
    await page.getByRole('link', { name: 'Projects' }).first().click()
    await banner.waitFor({ state: 'detached', timeout: 10000 })
    // The requests refused on purpose were logged by the browser.
    expected(before, /ERR_INTERNET_DISCONNECTED|Failed to fetch|does not answer/)
  })

  await page.setViewportSize(desktop)
  await page.emulateMedia({ colorScheme: 'light' })
  page.setDefaultTimeout(30000)
  if (failures.length) throw new Error('consb: ' + failures.join(' | '))
}
