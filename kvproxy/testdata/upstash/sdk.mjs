// Drives a store through its REST front with the @upstash/redis SDK, unmodified, configured with nothing
// but the credentials the API prints (UPSTASH_REDIS_REST_URL, UPSTASH_REDIS_REST_TOKEN; the appliance's CA
// through NODE_EXTRA_CA_CERTS). Prints one JSON object of what came back; the Go test checks it.
import { Redis } from "@upstash/redis";

const redis = Redis.fromEnv({ retry: false });
const out = {};
out.set = await redis.set("greeting", "héllo wörld");
out.get = await redis.get("greeting");
out.setex = await redis.set("session", { user: 42, roles: ["a", "b"] }, { ex: 100 });
out.object = await redis.get("session");
out.ttlPositive = (await redis.ttl("session")) > 0;
out.incr = await redis.incr("counter");
out.incrby = await redis.incrby("counter", 41);
out.hset = await redis.hset("user:1", { name: "Ada", age: 36 });
out.hgetall = await redis.hgetall("user:1");
out.lpush = await redis.lpush("list", "c", "b", "a");
out.lrange = await redis.lrange("list", 0, -1);
out.zadd = await redis.zadd("board", { score: 3, member: "x" }, { score: 1, member: "y" });
out.zrange = await redis.zrange("board", 0, -1, { withScores: true });
out.missing = await redis.get("no-such-key");
const p = redis.pipeline();
p.set("p1", "one");
p.get("p1");
p.incr("counter");
out.pipeline = await p.exec();
const tx = redis.multi();
tx.set("t1", "x");
tx.get("t1");
tx.del("t1");
out.multi = await tx.exec();
try {
  await redis.hget("greeting", "field");
  out.wrongType = "no error";
} catch (e) {
  out.wrongType = String(e.message);
}
out.dbsize = await redis.dbsize();
const bad = new Redis({ url: process.env.UPSTASH_REDIS_REST_URL, token: "kv_not_a_token", retry: false });
try {
  await bad.get("greeting");
  out.badToken = "no error";
} catch (e) {
  out.badToken = String(e.message);
}
console.log(JSON.stringify(out));
