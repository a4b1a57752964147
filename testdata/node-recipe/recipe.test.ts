// recipe.test.ts: a test run in miniature: the global setup, one test querying DATABASE_URL with pg, the
// teardown. Run with `npm test` (tsx: Node 20 runs no .ts files itself).
import pg from 'pg'
import setup from './global-setup'

const teardown = await setup()
try {
  const db = new pg.Client({ connectionString: process.env.DATABASE_URL })
  await db.connect()
  const { rows } = await db.query('SELECT current_user AS "user", $1::int + 1 AS answer', [41])
  await db.end()
  console.log(JSON.stringify(rows[0]))
} finally {
  await teardown()
}
