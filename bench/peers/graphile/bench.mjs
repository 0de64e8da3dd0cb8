// graphile-worker's side of the peer benchmark (bench/peers): the same
// burn-down as `switchyard bench --only work` — JOBS no-op jobs inserted
// first, then drained by one worker process with CONCURRENCY jobs at once
// on a pool of MAX_CONNS connections — in a schema of its own, dropped at
// the end. Prints `name value unit` lines on stdout, like switchyard bench.
//
// MODE=batched is graphile-worker's fast configuration (a local queue that
// one query refills, completions batched); MODE=plain is its defaults.
//
// NOTE pads each job's payload, {n, note}, to the size the other systems'
// jobs carry (bench/peers computes it).
//
// Environment: DATABASE_URL, SCHEMA, JOBS, CONCURRENCY, MAX_CONNS, MODE, NOTE.
import { EventEmitter } from "node:events";
import pg from "pg";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";

const env = (name, def) => {
  const v = process.env[name] ?? def;
  if (v === undefined || v === "") throw new Error(`${name} is required`);
  return v;
};
const connectionString = env("DATABASE_URL");
const schema = env("SCHEMA");
const jobs = Number(env("JOBS", "200000"));
const concurrency = Number(env("CONCURRENCY", "64"));
const maxConns = Number(env("MAX_CONNS", "20"));
const mode = env("MODE", "batched");
const note = process.env.NOTE ?? "";
// The batched mode is the one compared: graphile_jobs_per_s.
const suffix = mode === "batched" ? "" : `_${mode}`;
if (!/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`SCHEMA ${schema} is not a plain identifier`);

const logger = new Logger(() => () => {}); // quiet: stdout is for figures
const base = { connectionString, schema, logger };
const admin = new pg.Pool({ connectionString, max: 2 });

const remaining = async () => {
  const r = await admin.query(`SELECT count(*)::int AS n FROM "${schema}"._private_jobs`);
  return r.rows[0].n;
};

try {
  await runMigrations(base);

  // Insert in batches, as switchyard bench's COPY and River's InsertMany do.
  const utils = await makeWorkerUtils({ ...base, maxPoolSize: maxConns });
  const batch = 5000;
  let t0 = process.hrtime.bigint();
  for (let i = 0; i < jobs; i += batch) {
    const specs = [];
    for (let j = i; j < Math.min(i + batch, jobs); j++) {
      specs.push({ identifier: "noop", payload: { n: j, note } });
    }
    await utils.addJobs(specs);
  }
  let secs = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`graphile${suffix}_insert_jobs_per_s ${Math.round(jobs / secs)} jobs/s`);
  await utils.release();
  await admin.query(`ANALYZE "${schema}"._private_jobs`);

  const worker =
    mode === "batched"
      ? { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 }
      : {};
  // Completions are counted from the runner's events (in-process, so the
  // count costs the database nothing), then confirmed in the table:
  // graphile-worker deletes a job when it completes, so drained is empty.
  const events = new EventEmitter();
  let done = 0;
  let allDone;
  const finished = new Promise((r) => (allDone = r));
  events.on("job:success", () => {
    if (++done === jobs) allDone();
  });
  t0 = process.hrtime.bigint();
  const runner = await run({
    events,
    ...base,
    concurrency,
    maxPoolSize: maxConns,
    noHandleSignals: true,
    taskList: { noop: async () => {} },
    preset: { worker },
  });
  await finished;
  while ((await remaining()) > 0) {
    await new Promise((r) => setTimeout(r, 5));
  }
  secs = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`graphile${suffix}_jobs_per_s ${Math.round(jobs / secs)} jobs/s`);
  await runner.stop();
} finally {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
  await admin.end();
}
