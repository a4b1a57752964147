import { useState } from 'preact/hooks'
import type { Connections } from '../api'
import { CopyField, ErrorBox, SecretField } from '../ui'
import { useDatabases, useRoles } from './databases'

/** The name the CA certificate is downloaded as; every snippet points at it. */
export const caFile = 'appliance-ca.crt'

/** Target is where a snippet connects: all of it read from the API's connection URLs, never typed here. */
export type Target = {
  host: string // as in a URL: an IPv6 address in brackets
  port: number
  database: string
  user: string
  password: string // '' when the page does not know it (a role whose password was shown once)
  sslmode: string
  pooled: boolean
  directPort?: number // the direct port, for a pooled target's migrations (Prisma's directUrl)
}

/** placeholder stands for a password the page does not know. */
export const placeholder = 'YOUR_PASSWORD'

/** parseURL reads a libpq URL of the connections answer. */
export function parseURL(raw: string): { host: string; port: number; database: string; user: string; password: string; sslmode: string } {
  const u = new URL(raw)
  return {
    host: u.hostname,
    port: Number(u.port || '5432'),
    database: decodeURIComponent(u.pathname.replace(/^\//, '')),
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    sslmode: u.searchParams.get('sslmode') || 'verify-full',
  }
}

const enc = (s: string) => encodeURIComponent(s).replace(/'/g, '%27')
const bare = (host: string) => host.replace(/^\[(.*)\]$/, '$1')

/** url is the target as a libpq URL verifying the server with the downloaded CA; extra adds parameters. */
export function url(t: Target, extra = ''): string {
  const pw = t.password || placeholder
  return `postgresql://${enc(t.user)}:${enc(pw)}@${t.host}:${t.port}/${enc(t.database)}?sslmode=${t.sslmode}&sslrootcert=${caFile}${extra}`
}

/** picked is an API connection URL for another database or role, the rest (host, port, sslmode, the CA's path
 * on the appliance's machine) as the API sent it; the API's own URL when nothing else is picked. */
export function picked(raw: string, database: string, user: string, password: string): string {
  const u = new URL(raw)
  if (database === decodeURIComponent(u.pathname.slice(1)) && user === decodeURIComponent(u.username)) return raw
  return `postgresql://${enc(user)}:${enc(password || placeholder)}@${u.host}/${enc(database)}${u.search}`
}

const str = (s: string) => JSON.stringify(s) // a double-quoted literal valid in JavaScript, Python and Go

/** snippets are the ways to connect to t, by client. */
export function snippets(t: Target): { id: string; label: string; code: string }[] {
  const pw = t.password || placeholder
  const poolNote = t.pooled ? ' (pooled: PgBouncer in transaction mode, no server-side prepared statements)' : ''
  return [
    { id: 'psql', label: 'psql', code: `psql '${url(t)}'` },
    {
      id: 'env',
      label: '.env',
      code: [
        `DATABASE_URL=${str(url(t))}`,
        `PGHOST=${bare(t.host)}`,
        `PGPORT=${t.port}`,
        `PGDATABASE=${t.database}`,
        `PGUSER=${t.user}`,
        `PGPASSWORD=${str(pw)}`,
        `PGSSLMODE=${t.sslmode}`,
        `PGSSLROOTCERT=${caFile}`,
      ].join('\n'),
    },
    {
      id: 'node',
      label: 'Node (pg)',
      code: [
        `import fs from 'node:fs'`,
        `import pg from 'pg'`,
        ``,
        `// ${t.database} as ${t.user}${poolNote}`,
        `const client = new pg.Client({`,
        `  host: ${str(bare(t.host))},`,
        `  port: ${t.port},`,
        `  database: ${str(t.database)},`,
        `  user: ${str(t.user)},`,
        `  password: ${str(pw)},`,
        `  // verifies the server's certificate and name against the appliance's CA`,
        `  ssl: { ca: fs.readFileSync(${str(caFile)}, 'utf8'), rejectUnauthorized: true },`,
        `})`,
        `await client.connect()`,
        `console.log((await client.query('SELECT version()')).rows[0])`,
        `await client.end()`,
      ].join('\n'),
    },
    {
      id: 'python',
      label: 'Python (psycopg)',
      code: [
        `import psycopg`,
        ``,
        `# ${t.database} as ${t.user}${poolNote}`,
        `with psycopg.connect(`,
        `    host=${str(bare(t.host))},`,
        `    port=${t.port},`,
        `    dbname=${str(t.database)},`,
        `    user=${str(t.user)},`,
        `    password=${str(pw)},`,
        `    sslmode=${str(t.sslmode)},`,
        `    sslrootcert=${str(caFile)},`,
        ...(t.pooled ? [`    prepare_threshold=None,`] : []),
        `) as conn:`,
        `    print(conn.execute("SELECT version()").fetchone())`,
      ].join('\n'),
    },
    {
      id: 'go',
      label: 'Go (pgx)',
      code: [
        `package main`,
        ``,
        `import (`,
        `\t"context"`,
        `\t"fmt"`,
        ``,
        `\t"github.com/jackc/pgx/v5"`,
        `)`,
        ``,
        `func main() {`,
        `\tctx := context.Background()`,
        `\t// ${t.database} as ${t.user}${poolNote}`,
        `\tconn, err := pgx.Connect(ctx, ${str(url(t, t.pooled ? '&default_query_exec_mode=simple_protocol' : ''))})`,
        `\tif err != nil {`,
        `\t\tpanic(err)`,
        `\t}`,
        `\tdefer conn.Close(ctx)`,
        `\tvar v string`,
        `\tif err := conn.QueryRow(ctx, "SELECT version()").Scan(&v); err != nil {`,
        `\t\tpanic(err)`,
        `\t}`,
        `\tfmt.Println(v)`,
        `}`,
      ].join('\n'),
    },
    {
      id: 'prisma',
      label: 'Prisma',
      code: [
        `// schema.prisma (${caFile} next to it: Prisma reads certificates relative to the schema)`,
        `datasource db {`,
        `  provider  = "postgresql"`,
        `  url       = env("DATABASE_URL")`,
        ...(t.pooled ? [`  directUrl = env("DIRECT_URL") // migrations need a direct connection`] : []),
        `}`,
        ``,
        `// .env`,
        `DATABASE_URL=${str(prismaURL(t))}`,
        ...(t.pooled && t.directPort ? [`DIRECT_URL=${str(prismaURL({ ...t, port: t.directPort, pooled: false }))}`] : []),
      ].join('\n'),
    },
  ]
}

/** prismaURL: Prisma's engine takes sslmode=require with sslcert (the CA) and sslaccept=strict to verify. */
function prismaURL(t: Target): string {
  const pw = t.password || placeholder
  const q = `sslmode=require&sslcert=${caFile}&sslaccept=strict` + (t.pooled ? '&pgbouncer=true' : '')
  return `postgresql://${enc(t.user)}:${enc(pw)}@${t.host}:${t.port}/${enc(t.database)}?${q}`
}

/** Role is a login to pick: the project's own (its password known from the connection URLs) or another. */
export type Role = { name: string; password?: string }

/** ConnectCard is the project's connection widget: database and role pickers, pooled or direct, a snippet
 * per client with the CA to download next to them. */
export function ConnectCard({ path, conns, error, active }: { path: string; conns?: Connections; error: string; active: boolean }) {
  const dbList = useDatabases(path, active)
  const roleList = useRoles(path, active)
  const databases = dbList.data?.databases.map((d) => d.name)
  // The project's own role is reserved: its login (conns.username) is the one to pick, with its password.
  const roles = roleList.data?.roles.filter((r) => !r.reserved).map((r) => r.name)
  const [db, setDB] = useState('')
  const [role, setRole] = useState('')
  const [pooled, setPooled] = useState(false)
  const [client, setClient] = useState('psql')
  if (!active || !conns) {
    return (
      <section class="card" aria-labelledby="connect-heading">
        <h2 id="connect-heading">Connect</h2>
        {!active && <p>Connection strings appear once the project is active.</p>}
        <ErrorBox error={error} />
      </section>
    )
  }
  const direct = parseURL(conns.direct_url)
  const pool = parseURL(conns.pooled_url)
  const dbs = uniq([direct.database, ...(databases ?? [])])
  const users = uniq([conns.username, ...(roles ?? [])])
  const database = dbs.includes(db) ? db : direct.database
  const user = users.includes(role) ? role : conns.username
  const own = user === conns.username
  const base = pooled ? pool : direct
  const t: Target = {
    host: base.host,
    port: base.port,
    database,
    user,
    password: own ? base.password : '',
    sslmode: base.sslmode,
    pooled,
    directPort: direct.port,
  }
  const urlLabel = pooled ? 'Pooled connection (PgBouncer, transaction mode)' : 'Direct connection'
  const all = snippets(t)
  const shown = all.find((s) => s.id === client) ?? all[0]
  return (
    <section class="card connect" aria-labelledby="connect-heading">
      <h2 id="connect-heading">Connect</h2>
      <ErrorBox error={error} />
      <div class="row connect-pickers">
        <div>
          <label for="connect-db">Database</label>
          <select id="connect-db" value={database} onChange={(e) => setDB((e.target as HTMLSelectElement).value)}>
            {dbs.map((d) => (
              <option value={d}>{d}</option>
            ))}
          </select>
        </div>
        <div>
          <label for="connect-role">Role</label>
          <select id="connect-role" value={user} onChange={(e) => setRole((e.target as HTMLSelectElement).value)}>
            {users.map((r) => (
              <option value={r}>{r === conns.username ? r + ' (the project’s login)' : r}</option>
            ))}
          </select>
        </div>
        <div>
          <span class="label" id="connect-mode">Connection</span>
          <div class="segmented" role="group" aria-labelledby="connect-mode">
            <button type="button" aria-pressed={pooled} onClick={() => setPooled(true)} title="PgBouncer in transaction mode: many short connections">
              Pooled
            </button>
            <button type="button" aria-pressed={!pooled} onClick={() => setPooled(false)} title="PostgreSQL itself: migrations, LISTEN, session state">
              Direct
            </button>
          </div>
        </div>
      </div>
      {own ? (
        <SecretField label={urlLabel} value={picked(pooled ? conns.pooled_url : conns.direct_url, database, user, t.password)} hide={[enc(t.password)]} />
      ) : (
        <CopyField label={urlLabel} value={picked(pooled ? conns.pooled_url : conns.direct_url, database, user, '')} />
      )}
      <nav class="tabs snippet-tabs" aria-label="Client">
        {all.map((s) => (
          <button type="button" aria-pressed={s.id === shown.id} onClick={() => setClient(s.id)}>
            {s.label}
          </button>
        ))}
      </nav>
      <SnippetField key={shown.id + user} label={shown.label + ' snippet'} code={shown.code} secret={own ? t.password : ''} />
      {!own && (
        <p class="hint">
          The password of <code>{user}</code> was shown once, when the role was created or its password reset: put it in place of <code>{placeholder}</code>.
        </p>
      )}
      <p class="hint">
        Every connection verifies the server ({t.sslmode === 'verify-full' ? 'certificate and name' : t.sslmode}) against the appliance's CA. The URL
        names it where the appliance keeps it (right on this machine); the snippets name the downloaded copy:{' '}
        <a href="/v1/ca.crt" download={caFile} class="button">
          Download the CA certificate ({caFile})
        </a>{' '}
        and keep it next to your code.
        {pooled && ' The pooled port runs PgBouncer in transaction mode: the snippets turn off server-side prepared statements where the client uses them.'}
      </p>
    </section>
  )
}

/** SnippetField is a snippet through SecretField when it carries a password (masked, Show/Hide, Copy). */
function SnippetField({ label, code, secret }: { label: string; code: string; secret: string }) {
  // Every form the password takes in a snippet: URL-encoded, and inside a string literal.
  const hide = secret ? [enc(secret), str(secret).slice(1, -1)] : undefined
  return secret ? <SecretField label={label} value={code} hide={hide} /> : <CopyField label={label} value={code} />
}

function uniq(xs: string[]): string[] {
  return [...new Set(xs.filter(Boolean))]
}
