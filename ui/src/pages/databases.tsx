import { useState } from 'preact/hooks'
import { del, get, post, seg, type Me, type Schemas } from '../api'
import { AdminOnly, Badge, Empty, ErrorBox, Form, isOrgAdmin, SecretField, Table, useListAction, useLoad } from '../ui'
import { bytes } from './overview'

type Database = Schemas['Database']
type Role = Schemas['DatabaseRole']
type RolePassword = Schemas['RolePassword']

const namePattern = '[a-z_][a-z0-9_]{0,62}'
const nameHint = 'Lowercase letters, digits and underscores, starting with a letter or underscore.'

/** useDatabases and useRoles are the project's lists (the connection widget's pickers read them too). */
export function useDatabases(path: string, active: boolean) {
  return useLoad(() => (active ? get<{ databases: Database[] }>(path + '/databases') : Promise.resolve(undefined)), [path, active])
}
export function useRoles(path: string, active: boolean) {
  return useLoad(() => (active ? get<{ roles: Role[] }>(path + '/roles') : Promise.resolve(undefined)), [path, active])
}

/** DatabasesTab: the databases and login roles of the project's server: create and drop a database,
 * create a role, reset its password (shown once) and drop it. */
export function DatabasesTab({ path, active, me }: { path: string; active: boolean; me: Me }) {
  const dbs = useDatabases(path, active)
  const roles = useRoles(path, active)
  if (!active) return <p>Databases and roles can be managed once the project is active.</p>
  return (
    <>
      <Databases path={path} list={dbs} roles={roles.data?.roles ?? []} me={me} />
      <Roles path={path} list={roles} onDropped={dbs.reload} />
    </>
  )
}

function Databases({ path, list, roles, me }: { path: string; list: ReturnType<typeof useDatabases>; roles: Role[]; me: Me }) {
  const [name, setName] = useState('')
  const [owner, setOwner] = useState('')
  const [error, act] = useListAction(list)
  const admin = isOrgAdmin(me)
  return (
    <section class="card" aria-labelledby="databases-heading">
      <h2 id="databases-heading">Databases</h2>
      <Form
        label="Create a database"
        onSubmit={async () => {
          await post(path + '/databases', owner ? { name, owner } : { name })
          setName('')
          await list.reload()
        }}
      >
        <div class="row">
          <div>
            <label for="db-name">Database name</label>
            <input id="db-name" required pattern={namePattern} maxLength={63} title={nameHint} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </div>
          <div>
            <label for="db-owner">Owner</label>
            <select id="db-owner" value={owner} onChange={(e) => setOwner((e.target as HTMLSelectElement).value)}>
              {roles.map((r) => (
                <option value={r.reserved ? '' : r.name}>{r.reserved ? r.name + ' (the project’s role)' : r.name}</option>
              ))}
            </select>
          </div>
          <button type="submit" class="primary">
            Create database
          </button>
        </div>
        <p class="hint">{nameHint} A new database is reachable directly and through the pooler at once.</p>
      </Form>
      <ErrorBox error={list.error || error} />
      {list.data && list.data.databases.length === 0 && <Empty>No databases.</Empty>}
      {list.data && list.data.databases.length > 0 && (
        <Table cols={['Database', 'Owner', { label: 'Size', sm: true }, { label: 'Actions', hidden: true }]}>
          {list.data.databases.map((d) => (
            <tr key={d.name}>
              <td>
                <code>{d.name}</code> {d.reserved && <Badge value="active" label="the project’s" />}
              </td>
              <td>
                <code>{d.owner}</code>
              </td>
              <td class="sm-hide">{bytes(d.size_bytes)}</td>
              <td>
                {!d.reserved && admin && (
                  <button
                    class="danger"
                    aria-label={'Drop ' + d.name}
                    onClick={() =>
                      confirm(`Drop the database “${d.name}”? Its sessions end and its data is gone (a backup taken before keeps it).`) &&
                      act(() => del(path + '/databases/' + seg(d.name)))
                    }
                  >
                    Drop
                  </button>
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
      <AdminOnly me={me} what="drop a database">
        {null}
      </AdminOnly>
    </section>
  )
}

function Roles({ path, list, onDropped }: { path: string; list: ReturnType<typeof useRoles>; onDropped: () => unknown }) {
  const [name, setName] = useState('')
  const [shown, setShown] = useState<{ what: string; r: RolePassword } | null>(null)
  const [error, act] = useListAction(list)
  return (
    <section class="card" aria-labelledby="roles-heading">
      <h2 id="roles-heading">Roles</h2>
      {shown && (
        <div class="notice card" role="status">
          <h3>
            {shown.what} <code>{shown.r.role.name}</code>
          </h3>
          <p>Copy the password now: it is shown this once (the appliance keeps none of it). A lost password is reset, not recovered.</p>
          <SecretField label={'Password of ' + shown.r.role.name} value={shown.r.password} />
          <button type="button" onClick={() => setShown(null)}>
            Done
          </button>
        </div>
      )}
      <Form
        label="Create a role"
        onSubmit={async () => {
          const r = await post<RolePassword>(path + '/roles', { name })
          setShown({ what: 'Role created:', r })
          setName('')
          await list.reload()
        }}
      >
        <div class="row">
          <div>
            <label for="role-name">Role name</label>
            <input id="role-name" required pattern={namePattern} maxLength={63} title={nameHint} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </div>
          <button type="submit" class="primary">
            Create role
          </button>
        </div>
        <p class="hint">
          {nameHint} A role logs in (directly and pooled) and connects to the project's database; it is not a superuser and cannot create roles or
          databases. The project's role can grant it tables.
        </p>
      </Form>
      <ErrorBox error={list.error || error} />
      {list.data && (
        <Table cols={['Role', { label: 'Actions', hidden: true }]}>
          {list.data.roles.map((r) => (
            <tr key={r.name}>
              <td>
                <code>{r.name}</code> {r.reserved && <span class="hint">the project’s role: its password changes with Settings → Rotate password</span>}
              </td>
              <td>
                {!r.reserved && (
                  <div class="cell-actions">
                  <button
                    aria-label={'Reset password of ' + r.name}
                    onClick={() =>
                      confirm(`Reset the password of “${r.name}”? The current one stops working for new connections.`) &&
                      act(async () => setShown({ what: 'New password for', r: await post<RolePassword>(path + '/roles/' + seg(r.name) + '/reset-password') }))
                    }
                  >
                    Reset password
                  </button>
                  <button
                    class="danger"
                    aria-label={'Drop role ' + r.name}
                    onClick={() =>
                      confirm(`Drop the role “${r.name}”? Its sessions end and it logs in no more; what it owns passes to the project’s role.`) &&
                      act(async () => {
                        await del(path + '/roles/' + seg(r.name))
                        if (shown?.r.role.name === r.name) setShown(null)
                        onDropped()
                      })
                    }
                  >
                    Drop
                  </button>
                  </div>
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  )
}
