#!/usr/bin/env node
// Validates Kubernetes manifests offline, with no cluster: node validate.js MODULES FILE...
//
// MODULES is the folder where `npm ci` installed this folder's package-lock.json
// (tools/validate-kubernetes.sh does that, in the build directory). Every YAML document of every
// FILE must be an object of a built-in kind that is valid against the Kubernetes OpenAPI schema
// of its apiVersion and kind (kubernetes-models: types, required fields, enums, formats such as
// quantities), with no field the schema does not know (the schemas allow unknown fields; the API
// server's strict field validation refuses them, so this does too) and a metadata.name. The
// documents are read as YAML 1.1, as kubectl reads them (`yes` is a boolean, `0750` octal), and
// a key given twice is an error.
//
// Then the checks of DDO's own manifests (deploy/kubernetes), when a DaemonSet "ddod" is among
// them: ddod runs in the node's PID and IPC namespaces as a non-root uid, its memory limit has
// room for --ram-budget-gb, its init container chowns the directories to that uid, and every Pod
// that mounts its socket directory mounts the same host path, shares the node's IPC namespace and
// runs as ddod's uid (or, without a GPU, in its group); --dockerfile FILE checks the image's uid,
// and --require-ddo fails the run unless the DaemonSet and a runner Pod were both found.
//
// Last, a self-check: broken manifests made here must each be refused, for the reason meant, and
// a valid one accepted, so that a validator that accepts everything cannot pass.
//
// Prints what it validated; exits 0 when everything is valid, 1 otherwise, 2 on a usage error.
"use strict";

const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const GiB = 1024 ** 3;
// ddod's headroom: its memory limit minus --ram-budget-gb (docs/deploy.md).
const MIN_HEADROOM_BYTES = 4 * GiB;

function usage(message) {
  process.stderr.write(`validate.js: ${message}\n` +
    "usage: node validate.js MODULES_DIR [--dockerfile FILE] [--require-ddo] MANIFEST.yaml...\n");
  process.exit(2);
}

const argv = process.argv.slice(2);
if (argv.length < 1) usage("no modules directory");
const modulesDir = path.resolve(argv.shift());
let dockerfile = null;
let requireDdo = false;
const files = [];
while (argv.length > 0) {
  const arg = argv.shift();
  if (arg === "--require-ddo") {
    requireDdo = true;
  } else if (arg === "--dockerfile") {
    if (argv.length === 0) usage("--dockerfile needs a file");
    dockerfile = argv.shift();
  } else {
    files.push(arg);
  }
}
if (files.length === 0) usage("no manifest given");

const load = createRequire(path.join(modulesDir, "package.json"));
let YAML;
try {
  YAML = load("yaml");
  load.resolve("kubernetes-models/v1/Pod");
} catch (error) {
  process.stderr.write(`validate.js: the validator's packages are not in ${modulesDir} ` +
    `(${error.message.split("\n")[0]}); tools/validate-kubernetes.sh installs them\n`);
  process.exit(2);
}
const versionOf = (name) => JSON.parse(fs.readFileSync(load.resolve(`${name}/package.json`))).version;

// ---------------------------------------------------------------------------------------------
// Schema validation

// The model class of apiVersion/kind, or null when kubernetes-models has none.
function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") return null;
  if (!/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) {
    return null;
  }
  let module;
  try {
    module = load(`kubernetes-models/${apiVersion}/${kind}`);
  } catch (error) {
    if (error.code === "MODULE_NOT_FOUND" || error.code === "ERR_PACKAGE_PATH_NOT_EXPORTED") {
      return null;
    }
    throw error;
  }
  const Model = module[kind];
  return Model && Model.apiVersion === apiVersion && Model.kind === kind ? Model : null;
}

// A view of `value` that records, for each object inside it, which property names the schema's
// validator read and whether it listed the object's keys (a map such as labels). The validators
// read every property their schema declares (present or not), so a key of an object that the
// validator looked into, that it never read, is a field the schema does not have.
function track(value, seen) {
  if (value === null || typeof value !== "object") return value;
  const info = { read: new Set(), listed: false };
  seen.set(value, info);
  const children = new Map();
  return new Proxy(value, {
    get(target, key) {
      const child = target[key];
      if (typeof key !== "string") return child;
      info.read.add(key);
      if (child === null || typeof child !== "object" ||
          !Object.prototype.hasOwnProperty.call(target, key)) {
        return child;
      }
      if (!children.has(key)) children.set(key, track(child, seen));
      return children.get(key);
    },
    ownKeys(target) {
      info.listed = true;
      return Reflect.ownKeys(target);
    },
  });
}

// The fields of `value` that the validator never read (see track), as paths.
function unknownFields(value, seen, where, found) {
  if (value === null || typeof value !== "object") return found;
  const info = seen.get(value);
  // Not looked into: below a field reported already, or an object of any shape (none read).
  if (info === undefined) return found;
  if (Array.isArray(value)) {
    value.forEach((item, i) => unknownFields(item, seen, `${where}[${i}]`, found));
    return found;
  }
  for (const key of Object.keys(value)) {
    const at = where === "" ? key : `${where}.${key}`;
    if (info.listed || info.read.has(key)) {
      unknownFields(value[key], seen, at, found);
    } else if (info.read.size > 0) {
      found.push(at);
    }
  }
  return found;
}

// The problems of one parsed document (an empty list when it is valid).
function problemsOf(doc) {
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    return ["not a mapping (a Kubernetes object)"];
  }
  const Model = modelFor(doc.apiVersion, doc.kind);
  if (Model === null) {
    return [`no schema for apiVersion ${JSON.stringify(doc.apiVersion)} kind ` +
            `${JSON.stringify(doc.kind)} (not a built-in kind of this Kubernetes API)`];
  }
  const problems = [];
  const seen = new WeakMap();
  try {
    Model.prototype.validate.call(track(doc, seen));
  } catch (error) {
    if (!Array.isArray(error.errors)) throw error;
    for (const item of error.errors) {
      const at = item.instancePath.split("/").slice(1)
        .map((part) => part.replace(/~1/g, "/").replace(/~0/g, "~"))
        .reduce((where, part) => /^[0-9]+$/.test(part) ? `${where}[${part}]`
                                 : where === "" ? part : `${where}.${part}`, "") || "(the object)";
      problems.push(`${at}: ${item.message}`);
    }
  }
  for (const field of unknownFields(doc, seen, "", [])) {
    problems.push(`${field}: unknown field (not in the schema of ${doc.apiVersion} ${doc.kind})`);
  }
  const name = doc.metadata && doc.metadata.name;
  if (typeof name !== "string" || name === "") problems.push("metadata.name: missing");
  return problems;
}

// The documents of a YAML text: [{doc, problems}], or a parse error as one entry's problems.
function parse(text) {
  const results = [];
  for (const document of YAML.parseAllDocuments(text, {
    version: "1.1", uniqueKeys: true, strict: true, prettyErrors: true,
  })) {
    const errors = [...document.errors, ...document.warnings];
    if (errors.length > 0) {
      results.push({ doc: null, problems: errors.map((e) => `YAML: ${e.message}`) });
      continue;
    }
    const doc = document.toJS({ maxAliasCount: 100 });
    if (doc === null || doc === undefined) continue;  // an empty document ("---" at the end)
    results.push({ doc, problems: problemsOf(doc) });
  }
  return results;
}

// ---------------------------------------------------------------------------------------------
// DDO's own checks

function quantityBytes(quantity) {
  const match = /^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$/.exec(String(quantity));
  if (!match) return NaN;
  const binary = { Ki: 1, Mi: 2, Gi: 3, Ti: 4, Pi: 5, Ei: 6 };
  const decimal = { k: 1, M: 2, G: 3, T: 4, P: 5, E: 6 };
  const unit = match[2];
  const scale = unit === undefined ? 1
    : unit in binary ? 1024 ** binary[unit] : 1000 ** decimal[unit];
  return Number(match[1]) * scale;
}

function flagValue(args, flag) {
  for (let i = 0; i < args.length; ++i) {
    if (args[i] === flag && i + 1 < args.length) return String(args[i + 1]);
    if (String(args[i]).startsWith(`${flag}=`)) return String(args[i]).slice(flag.length + 1);
  }
  return null;
}

// The host path of the volume that `container` mounts at `mountPath`, or null.
function hostPathAt(podSpec, container, mountPath) {
  const mount = (container.volumeMounts || []).find((m) => m.mountPath === mountPath);
  if (!mount) return null;
  const volume = (podSpec.volumes || []).find((v) => v.name === mount.name);
  return volume && volume.hostPath ? volume.hostPath.path : null;
}

// Checks DDO's manifests; returns [{what, problems}] ([] when there is no DaemonSet "ddod").
function ddoChecks(docs, dockerfileText) {
  const daemonSet = docs.find((d) => d && d.kind === "DaemonSet" && d.metadata &&
                                     d.metadata.name === "ddod");
  if (!daemonSet) return [];
  const results = [];
  const spec = ((daemonSet.spec || {}).template || {}).spec || {};
  const ddod = (spec.containers || []).find((c) => c.name === "ddod");
  const problems = [];
  const security = spec.securityContext || {};
  const uid = security.runAsUser;
  const gid = security.runAsGroup;
  if (!ddod) {
    return [{ what: "DaemonSet ddod", problems: ["no container named ddod"] }];
  }
  const args = [...(ddod.command || []), ...(ddod.args || [])].map(String);
  if (spec.hostPID !== true) problems.push("hostPID must be true: ddod sees runners' pids");
  if (spec.hostIPC !== true) problems.push("hostIPC must be true: the pool is in the node's /dev/shm");
  if (!Number.isInteger(uid) || uid === 0 || security.runAsNonRoot !== true) {
    problems.push("the pod must run as a non-root runAsUser with runAsNonRoot: true");
  }
  if (!Number.isInteger(gid)) problems.push("the pod must set runAsGroup (the socket group)");
  const socket = flagValue(args, "--socket");
  const socketDir = socket === null ? null : path.posix.dirname(socket);
  const hostSocketDir = socketDir === null ? null : hostPathAt(spec, ddod, socketDir);
  if (socket === null) problems.push("ddod has no --socket");
  else if (hostSocketDir === null) {
    problems.push(`the socket's directory ${socketDir} is not a hostPath volume`);
  }
  const budget = flagValue(args, "--ram-budget-gb");
  const limit = ddod.resources && ddod.resources.limits && ddod.resources.limits.memory;
  if (budget === null) problems.push("--ram-budget-gb must be explicit (/proc/meminfo is the node's)");
  if (limit === undefined) problems.push("ddod needs a memory limit");
  if (budget !== null && limit !== undefined) {
    const headroom = quantityBytes(limit) - Number(budget) * GiB;
    if (!(headroom >= MIN_HEADROOM_BYTES)) {
      problems.push(`memory limit ${limit} leaves ${(headroom / GiB).toFixed(1)} GiB beside ` +
                    `--ram-budget-gb ${budget}; at least ${MIN_HEADROOM_BYTES / GiB} GiB needed`);
    }
  }
  for (const init of spec.initContainers || []) {
    const script = [...(init.command || []), ...(init.args || [])].join(" ");
    if (/\bchown\b/.test(script) && !script.includes(`chown ${uid}:${gid} `)) {
      problems.push(`init container ${init.name} does not chown to ${uid}:${gid}`);
    }
  }
  if (dockerfileText !== null) {
    const match = /^ARG DDO_UID=([0-9]+)\s*$/m.exec(dockerfileText);
    if (!match || Number(match[1]) !== uid) {
      problems.push(`the Dockerfile's ARG DDO_UID (${match ? match[1] : "missing"}) is not ${uid}`);
    }
  }
  results.push({
    what: `DaemonSet ddod: uid ${uid} gid ${gid}, socket ${socket} on the node's ` +
          `${hostSocketDir}, --ram-budget-gb ${budget} in a ${limit} limit`,
    problems,
  });

  for (const pod of docs.filter((d) => d && d.kind === "Pod")) {
    const podSpec = pod.spec || {};
    const podSecurity = podSpec.securityContext || {};
    const podProblems = [];
    let runner = false;
    for (const container of podSpec.containers || []) {
      // Its mount of ddod's socket directory: the node's directory, or the same path inside.
      const mount = (container.volumeMounts || []).find((m) => {
        const volume = (podSpec.volumes || []).find((v) => v.name === m.name);
        return volume && volume.hostPath &&
               (volume.hostPath.path === hostSocketDir || m.mountPath === socketDir);
      });
      if (!mount) continue;
      runner = true;
      const hostDir = hostPathAt(podSpec, container, mount.mountPath);
      if (hostDir !== hostSocketDir) {
        podProblems.push(`${container.name} mounts ${hostDir}, not ddod's socket directory ` +
                         `${hostSocketDir}`);
      }
      const own = container.securityContext || {};
      const runAs = own.runAsUser ?? podSecurity.runAsUser;
      const runAsGroup = own.runAsGroup ?? podSecurity.runAsGroup;
      const groups = podSecurity.supplementalGroups || [];
      const limits = (container.resources && container.resources.limits) || {};
      const gpu = Object.keys(limits).some((k) => k.endsWith("/gpu"));
      if (gpu && runAs !== uid) {
        podProblems.push(`${container.name} has a GPU but runs as uid ${runAs}, not ddod's ` +
                         `${uid}: ddod streams to a GPU only for its own uid`);
      } else if (!gpu && runAs !== uid && runAsGroup !== gid && !groups.includes(gid)) {
        podProblems.push(`${container.name} is neither ddod's uid ${uid} nor in its group ${gid}`);
      }
      const address = (container.env || []).find((e) => e.name === "DDO_DAEMON");
      const expected = `unix:${path.posix.join(mount.mountPath, path.posix.basename(socket))}`;
      if (address && address.value !== expected) {
        podProblems.push(`${container.name}: DDO_DAEMON is ${address.value}, not ${expected}`);
      }
    }
    if (!runner) continue;
    if (podSpec.hostIPC !== true) {
      podProblems.push("hostIPC must be true: the runner maps the pool's segments from the " +
                       "node's /dev/shm");
    }
    results.push({ what: `Pod ${pod.metadata.name}: a runner of ddod on ${hostSocketDir}`,
                   problems: podProblems });
  }
  return results;
}

// ---------------------------------------------------------------------------------------------
// The self-check

function selfCheck(realDocs, dockerfileText) {
  // Written as YAML 1.1, as they are read: a string such as "yes" stays a string.
  const dump = (object) => YAML.stringify(object, { version: "1.1" });
  const pod = (spec) => ({
    apiVersion: "v1", kind: "Pod", metadata: { name: "self-check" },
    spec: { containers: [{ name: "c", image: "busybox" }], ...spec },
  });
  // Each must be refused, with a problem that matches its pattern.
  const broken = [
    ["an unknown field (hostPid)", dump(pod({ hostPid: true })), /hostPid: unknown field/],
    ["an unknown field deep inside", dump(pod({
      containers: [{ name: "c", image: "busybox", securityContext: { runAsUsr: 1 } }] })),
     /containers\[0\]\.securityContext\.runAsUsr: unknown field/],
    ["a string for a boolean", dump(pod({ hostPID: "yes" })), /hostPID: must be boolean/],
    ["a missing required field", dump({
      apiVersion: "v1", kind: "Pod", metadata: { name: "x" }, spec: {} }),
     /spec: must have required property '?containers'?/],
    ["a malformed quantity", dump(pod({
      containers: [{ name: "c", image: "busybox", resources: { limits: { memory: "56 GB" } } }] })),
     /resources\.limits\.memory/],
    ["a value outside its enum", dump(pod({ restartPolicy: "Sometimes" })),
     /restartPolicy: must be equal to one of the allowed values/],
    ["an unknown kind", "apiVersion: apps/v1\nkind: DaemonSett\nmetadata: {name: x}\n",
     /no schema for apiVersion "apps\/v1" kind "DaemonSett"/],
    ["a key given twice", "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\nkind: Pod\n",
     /YAML: .*[Mm]ap keys must be unique/],
    ["no metadata.name", "apiVersion: v1\nkind: Namespace\nmetadata: {}\n", /metadata\.name: missing/],
  ];
  const failures = [];
  for (const [what, text, expected] of broken) {
    const problems = parse(text).flatMap((r) => r.problems);
    if (!problems.some((p) => expected.test(p))) {
      failures.push(`${what} was not refused as expected (${problems.join("; ") || "accepted"})`);
    }
  }
  const valid = `${dump(pod({ hostPID: true, nodeSelector: { "a.b/c": "true" } }))}` +
    "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {a: b}\ndata: {k: v}\n";
  const validProblems = parse(valid).flatMap((r) => r.problems);
  if (validProblems.length > 0) failures.push(`a valid Pod and ConfigMap were refused: ${validProblems}`);
  let count = broken.length + 1;

  // DDO's checks must refuse a runner of another uid and a budget that fills the limit.
  if (ddoChecks(realDocs, dockerfileText).length > 1) {
    const copy = () => JSON.parse(JSON.stringify(realDocs));
    const otherUid = copy();
    for (const d of otherUid) {
      if (d && d.kind === "Pod") d.spec.securityContext = { ...d.spec.securityContext, runAsUser: 4242 };
    }
    const tight = copy();
    const ddod = tight.find((d) => d && d.kind === "DaemonSet").spec.template.spec.containers
      .find((c) => c.name === "ddod");
    const args = [...(ddod.command || []), ...(ddod.args || [])].map(String);
    ddod.command = [...args.filter((a, i) => a !== "--ram-budget-gb" &&
                                              args[i - 1] !== "--ram-budget-gb" &&
                                              !a.startsWith("--ram-budget-gb=")),
                    "--ram-budget-gb", "48"];
    delete ddod.args;
    ddod.resources.limits.memory = "50Gi";
    for (const [what, docs, expected] of [
      ["a GPU runner of another uid", otherUid, /runs as uid 4242, not ddod's/],
      ["a memory limit without headroom", tight, /leaves 2\.0 GiB beside --ram-budget-gb 48/],
    ]) {
      const problems = ddoChecks(docs, dockerfileText).flatMap((r) => r.problems);
      if (!problems.some((p) => expected.test(p))) {
        failures.push(`${what} was not refused (${problems.join("; ") || "accepted"})`);
      }
      ++count;
    }
  }
  return { count, failures };
}

// ---------------------------------------------------------------------------------------------

function main() {
  const kinds = new Map();
  const allDocs = [];
  let invalid = 0;
  let documents = 0;
  process.stdout.write(`validate-kubernetes: kubernetes-models ${versionOf("kubernetes-models")} ` +
    `(the OpenAPI schemas of Kubernetes 1.33), yaml ${versionOf("yaml")}, node ${process.version}\n`);
  for (const file of files) {
    let text;
    try {
      text = fs.readFileSync(file, "utf8");
    } catch (error) {
      process.stdout.write(`  ${file}: cannot read: ${error.message}\n`);
      ++invalid;
      continue;
    }
    const results = parse(text);
    if (results.length === 0) {
      process.stdout.write(`  ${file}: no document\n`);
      ++invalid;
    }
    for (const { doc, problems } of results) {
      ++documents;
      const name = doc && doc.metadata && doc.metadata.name;
      const namespace = doc && doc.metadata && doc.metadata.namespace;
      const label = doc === null ? "(unreadable)"
        : typeof doc !== "object" || Array.isArray(doc) ? "(not an object)"
          : `${doc.kind} ${namespace ? `${namespace}/` : ""}${name || "(no name)"}`;
      if (problems.length === 0) {
        process.stdout.write(`  ${file}: ${label}: valid\n`);
        kinds.set(doc.kind, (kinds.get(doc.kind) || 0) + 1);
        allDocs.push(doc);
      } else {
        ++invalid;
        process.stdout.write(`  ${file}: ${label}: INVALID\n`);
        for (const problem of problems) process.stdout.write(`      ${problem}\n`);
      }
    }
  }
  let dockerfileText = null;
  if (dockerfile !== null) {
    try {
      dockerfileText = fs.readFileSync(dockerfile, "utf8");
    } catch (error) {
      process.stdout.write(`  ${dockerfile}: cannot read: ${error.message}\n`);
      ++invalid;
    }
  }
  let ddoFailed = 0;
  // On the valid documents: an invalid one is reported above already.
  const ddo = ddoChecks(allDocs, dockerfileText);
  for (const { what, problems } of ddo) {
    process.stdout.write(`  ddo: ${what}: ${problems.length === 0 ? "consistent" : "INCONSISTENT"}\n`);
    for (const problem of problems) process.stdout.write(`      ${problem}\n`);
    if (problems.length > 0) ++ddoFailed;
  }
  if (requireDdo && !(ddo.length >= 2 && ddo[0].what.startsWith("DaemonSet ddod"))) {
    process.stdout.write("  ddo: INCONSISTENT: --require-ddo, but no valid DaemonSet ddod with a " +
                         "runner Pod that mounts its socket directory was found\n");
    ++ddoFailed;
  }
  const check = selfCheck(allDocs, dockerfileText);
  process.stdout.write(`  self-check: ${check.count - check.failures.length} of ${check.count} ` +
    "made-up manifests judged as meant (broken ones refused, a valid one accepted)\n");
  for (const failure of check.failures) process.stdout.write(`      ${failure}\n`);

  const summary = [...kinds.entries()].sort().map(([k, n]) => `${n} ${k}`).join(", ");
  const ok = invalid === 0 && ddoFailed === 0 && check.failures.length === 0;
  process.stdout.write(`validate-kubernetes: ${documents} document(s) in ${files.length} file(s): ` +
    `${documents - invalid} valid (${summary || "none"}), ${invalid} invalid; ` +
    `${ddo.length} DDO check(s), ${ddoFailed} failed; self-check ` +
    `${check.failures.length === 0 ? "passed" : "FAILED"}\n`);
  process.exit(ok ? 0 : 1);
}

main();
