// Opens the reports Strata writes, RUN_DIR/report.html (`strata run`, an epoch-based run or, with
// --stream, a stream run) and OUT/report.html (`strata sweep --report`), in headless Chromium and
// checks what a reader sees:
//  - the page loads from its file alone: any request that is not file:// is refused and counted;
//  - nothing on the console at level error or warning, no page error;
//  - every chart rendered with the data of the files it was made from (this script reads
//    metrics.jsonl, events.jsonl, results.csv and sweep.json itself): as many series as there are
//    curves, as many vertices and dots per series as there are values, every marker, every
//    sweep cell with its runs, its mean and its interval;
//  - axis ticks at round numbers (equal steps of 1, 2 or 5 times a power of ten);
//  - no text element overlaps another: the boxes of every SVG <text> and of every line of HTML
//    text, compared pairwise, at two window widths;
//  - no raw JSON and no command line on the page, and the sentences a reader looks for.
// It keeps a full-page screenshot of each report at each width in the --out directory.
//
//   node scripts/report-browser/check-report.mjs [--run RUN_DIR] [--stream RUN_DIR] [--sweep SWEEP_OUT] --out DIR
//
// Chromium is Debian's (/usr/bin/chromium, or $STRATA_CHROMIUM); playwright-core drives it
// (`npm install --prefix scripts/report-browser`, which scripts/install-deps.sh does). The flags
// keep Chromium off the network: without the background-networking ones it tries to reach
// Google's services at start-up. Prints one line per check and exits 1 if any failed.
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
// A wide window (two charts side by side) and a narrow one (the charts stacked, the tables
// wrapping): the layout must hold at both.
const WIDTHS = [1280, 760];

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (!["run", "stream", "sweep", "out"].includes(key) || i + 1 >= argv.length) {
      console.error(`usage: check-report.mjs [--run RUN_DIR] [--stream RUN_DIR] [--sweep SWEEP_OUT] --out DIR`);
      process.exit(2);
    }
    out[key] = path.resolve(argv[i + 1]);
  }
  if (!out.out || (!out.run && !out.stream && !out.sweep)) {
    console.error(`usage: check-report.mjs [--run RUN_DIR] [--stream RUN_DIR] [--sweep SWEEP_OUT] --out DIR`);
    process.exit(2);
  }
  return out;
}

let checks = 0;
const failures = [];
function check(ok, what, detail = "") {
  checks += 1;
  if (ok) {
    console.log(`ok: ${what}`);
  } else {
    failures.push(what);
    console.log(`FAIL: ${what}${detail ? `\n      ${detail}` : ""}`);
  }
}

const finite = (v) => typeof v === "number" && Number.isFinite(v);

function readJsonLines(file) {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.trim())
    .flatMap((l) => {
      try {
        return [JSON.parse(l)];
      } catch {
        return [];
      }
    });
}

// RFC 4180 enough for results.csv: quoted fields with doubled quotes.
function readCsv(file) {
  const rows = [];
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    if (!line) continue;
    const fields = [];
    let field = "";
    let quoted = false;
    for (let i = 0; i < line.length; i++) {
      const c = line[i];
      if (quoted) {
        if (c === '"' && line[i + 1] === '"') field += '"', i++;
        else if (c === '"') quoted = false;
        else field += c;
      } else if (c === '"') quoted = true;
      else if (c === ",") fields.push(field), (field = "");
      else field += c;
    }
    fields.push(field);
    rows.push(fields);
  }
  const [header, ...body] = rows;
  return body.map((r) => Object.fromEntries(header.map((h, i) => [h, r[i] ?? ""])));
}

// What the page holds, measured by the browser.
function inspectPage() {
  const box = (r) => [r.left, r.top, r.right, r.bottom];
  const visible = (r) => r.width > 0.5 && r.height > 0.5;
  const texts = [];
  for (const t of document.querySelectorAll("svg text")) {
    const r = t.getBoundingClientRect();
    if (visible(r)) {
      const svg = t.closest("svg");
      texts.push({ text: t.textContent.trim(), box: box(r), where: `svg.${svg.getAttribute("class")}` });
    }
  }
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const parent = node.parentElement;
    if (!node.textContent.trim() || parent.closest("svg, style, script, title")) continue;
    // The body of a closed <details> keeps its boxes in Chromium although nothing is drawn.
    const details = parent.closest("details");
    if (details && !details.open && !parent.closest("summary")) continue;
    if (parent.checkVisibility && !parent.checkVisibility({ visibilityProperty: true })) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (visible(r)) {
        texts.push({ text: node.textContent.trim().slice(0, 60), box: box(r), where: node.parentElement.tagName.toLowerCase() });
      }
    }
  }
  const overlaps = [];
  for (let i = 0; i < texts.length; i++) {
    for (let j = i + 1; j < texts.length; j++) {
      const a = texts[i].box, b = texts[j].box;
      // Lines of one paragraph touch; a pixel of slack on each axis keeps them apart.
      const w = Math.min(a[2], b[2]) - Math.max(a[0], b[0]);
      const h = Math.min(a[3], b[3]) - Math.max(a[1], b[1]);
      if (w > 1 && h > 1) overlaps.push(`"${texts[i].text}" (${texts[i].where}) and "${texts[j].text}" (${texts[j].where})`);
    }
  }
  const charts = [...document.querySelectorAll("svg.chart")].map((svg) => {
    const width = svg.width.baseVal.value, height = svg.height.baseVal.value;
    const inside = (x, y) => x >= 0 && x <= width && y >= 0 && y <= height;
    const series = [...svg.querySelectorAll("path.series")].map((p) => {
      const d = p.getAttribute("d");
      const coords = [...d.matchAll(/[ML]\s*([-\d.]+),([-\d.]+)/g)].map((m) => [+m[1], +m[2]]);
      return {
        label: p.dataset.series,
        classes: p.getAttribute("class"),
        declared: +p.dataset.points,
        vertices: coords.length,
        inside: coords.every(([x, y]) => inside(x, y)),
        length: p.getTotalLength(),
        dots: [...svg.querySelectorAll("circle.point")].filter((c) => c.dataset.series === p.dataset.series).length,
      };
    });
    const ticks = (cls) => [...svg.querySelectorAll(`text.${cls}`)].map((t) => t.textContent);
    return {
      kind: [...svg.classList].filter((c) => c !== "chart" && c !== "forest").join(" "),
      title: svg.querySelector(".chart-title")?.textContent ?? "",
      empty: svg.querySelector(".empty")?.textContent ?? null,
      rendered: svg.getBoundingClientRect().width > 0 && svg.getBoundingClientRect().height > 0,
      series,
      markers: Object.fromEntries(
        ["switch-marker", "resume-marker", "restart-marker", "drift-marker"].map((m) => [m, svg.querySelectorAll(`.marker.${m}`).length]),
      ),
      rows: [...svg.querySelectorAll("g.cell-row")].map((g) => ({
        cell: g.dataset.cell,
        n: +g.dataset.n,
        baseline: g.classList.contains("baseline"),
        runs: g.querySelectorAll(".run-point").length,
        means: g.querySelectorAll(".mean-point").length,
        intervals: g.querySelectorAll(".interval").length,
        value: g.querySelector(".value")?.textContent ?? "",
      })),
      baselineLines: svg.querySelectorAll(".baseline-line").length,
      xTicks: ticks("x-tick"),
      yTicks: ticks("y-tick"),
    };
  });
  const tableColumn = (tableClass, header) => {
    const table = document.querySelector(`table.${tableClass}`);
    if (!table) return null;
    const headers = [...table.rows[0].cells].map((c) => c.textContent);
    const i = headers.indexOf(header);
    return i < 0 ? null : [...table.rows].slice(1).map((r) => r.cells[i].textContent);
  };
  return {
    texts: texts.length,
    overlaps,
    charts,
    refresh: !!document.querySelector("meta[http-equiv='refresh']"),
    state: document.body.dataset.state ?? null,
    bodyText: document.body.innerText,
    varianceIntervals: tableColumn("variance", "95% bootstrap interval"),
    meanIntervals: tableColumn("summary", "95% interval of the mean"),
    timelineRows: document.querySelectorAll("table.timeline tr").length - 1,
  };
}

// Equal steps of 1, 2 or 5 times a power of ten between consecutive labels ("20k" is 20000).
function roundTicks(labels) {
  const values = labels.map((l) => (l.endsWith("k") ? parseFloat(l) * 1000 : parseFloat(l.replace(/,/g, ""))));
  if (values.length < 2 || values.some((v) => !Number.isFinite(v))) return false;
  const step = values[1] - values[0];
  const mantissa = step / 10 ** Math.floor(Math.log10(step));
  const roundStep = [1, 2, 5, 10].some((m) => Math.abs(mantissa - m) < 1e-6);
  const equal = values.every((v, i) => i === 0 || Math.abs(v - values[i - 1] - step) < step * 1e-6);
  return step > 0 && roundStep && equal;
}

async function openReport(context, file, name, outDir) {
  const pages = [];
  for (const width of WIDTHS) {
    const page = await context.newPage();
    await page.setViewportSize({ width, height: 900 });
    const refused = [];
    await page.route(
      (url) => url.protocol !== "file:",
      (route) => {
        refused.push(route.request().url());
        return route.abort();
      },
    );
    const messages = [];
    page.on("console", (m) => {
      if (m.type() === "error" || m.type() === "warning") messages.push(`${m.type()}: ${m.text()}`);
    });
    page.on("pageerror", (e) => messages.push(`page error: ${e.message}`));
    await page.goto(pathToFileURL(file).href, { waitUntil: "load" });
    const seen = await page.evaluate(inspectPage);
    const shot = path.join(outDir, `${name}-${width}px.png`);
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`screenshot: ${shot}`);
    await page.close();
    check(refused.length === 0, `${name} at ${width} px: loads from its file alone`, refused.join(", "));
    check(messages.length === 0, `${name} at ${width} px: nothing on the console`, messages.join("; "));
    check(
      seen.overlaps.length === 0,
      `${name} at ${width} px: none of ${seen.texts} text boxes overlaps another`,
      seen.overlaps.slice(0, 10).join("\n      "),
    );
    pages.push(seen);
  }
  return pages[0];
}

function checkTicks(name, chart) {
  if (chart.empty !== null) return;
  check(roundTicks(chart.xTicks), `${name} ${chart.kind}: x ticks at round numbers (${chart.xTicks.join(" ")})`);
  if (chart.yTicks.length > 0) {
    check(roundTicks(chart.yTicks), `${name} ${chart.kind}: y ticks at round numbers (${chart.yTicks.join(" ")})`);
  }
}

function checkSeries(name, chart, expected) {
  const labels = Object.keys(expected).filter((k) => expected[k] > 0);
  check(
    JSON.stringify(chart.series.map((s) => s.label).sort()) === JSON.stringify(labels.sort()),
    `${name} ${chart.kind}: one series per curve of the data (${labels.join(", ")})`,
    `drawn: ${chart.series.map((s) => s.label).join(", ")}`,
  );
  for (const s of chart.series) {
    const want = expected[s.label];
    check(
      s.vertices === want && s.declared === want && s.inside && (want < 2 || s.length > 0),
      `${name} ${chart.kind} "${s.label}": ${want} points drawn inside the chart`,
      `vertices ${s.vertices}, data-points ${s.declared}, inside ${s.inside}, length ${s.length}`,
    );
    if (!s.classes.includes("run-curve")) {
      check(s.dots === want, `${name} ${chart.kind} "${s.label}": a dot per point`, `dots ${s.dots}`);
    }
  }
}

function checkRun(page, runDir) {
  const metrics = readJsonLines(path.join(runDir, "metrics.jsonl"));
  const events = readJsonLines(path.join(runDir, "events.jsonl"));
  const summary = JSON.parse(fs.readFileSync(path.join(runDir, "summary.json"), "utf8"));
  const count = (x, y) => metrics.filter((m) => finite(m[x]) && finite(m[y])).length;
  const workers = Math.max(0, ...metrics.map((m) => (Array.isArray(m.worker_samples_per_s) ? m.worker_samples_per_s.length : 0)));
  const throughput = {};
  for (let r = 0; r < workers; r++) {
    throughput[`worker ${r}`] = metrics.filter(
      (m) => finite(m.wall_s) && Array.isArray(m.worker_samples_per_s) && finite(m.worker_samples_per_s[r]),
    ).length;
  }
  const expected = {
    "loss-epoch": { "validation loss": count("epoch", "val_loss"), "training loss": count("epoch", "train_loss") },
    "accuracy-epoch": { "validation accuracy": count("epoch", "val_acc") },
    "loss-time": { "validation loss": count("wall_s", "val_loss"), "training loss": count("wall_s", "train_loss") },
    "accuracy-time": { "validation accuracy": count("wall_s", "val_acc") },
    "throughput-time": throughput,
  };
  check(metrics.length > 0 && workers > 0, `run: metrics.jsonl has evaluations with each worker's samples/s`);
  const switches = events.filter((e) => e.event === "switch_done").length;
  const restarts = events.filter((e) => e.event === "restart").length;
  for (const [kind, series] of Object.entries(expected)) {
    const charts = page.charts.filter((c) => c.kind === kind);
    check(charts.length === 1 && charts[0].rendered, `run: the chart ${kind} is drawn`);
    if (charts.length !== 1) continue;
    checkSeries("run", charts[0], series);
    checkTicks("run", charts[0]);
    check(
      charts[0].markers["switch-marker"] === switches,
      `run ${kind}: ${switches} switch marker(s)`,
      `drawn: ${charts[0].markers["switch-marker"]}`,
    );
    if (kind.endsWith("-time")) {
      check(charts[0].markers["restart-marker"] === restarts, `run ${kind}: ${restarts} restart marker(s)`);
    }
  }
  check(!page.refresh && page.state === summary.state, `run: a finished run's report no longer reloads (state ${summary.state})`);
  check(!/\{"|":\s*[\[{"]/.test(page.bodyText), "run: no raw JSON on the page");
  check(!/--port-file|--listen|\/strata-(worker|ps|evaluator|sharder)\b/.test(page.bodyText), "run: no command line on the page");
  check(page.timelineRows > 0, `run: the timeline has ${page.timelineRows} rows`);
  if (switches > 0) {
    check(
      /Switched to parameter servers at epoch \d+\.\d after [\d.]+ (ms|s), handover [\d.]+ (us|ms|s)\./.test(page.bodyText),
      "run: the summary says when the switch came, in words and units",
    );
  }
  check(/Final validation accuracy \d+\.\d\d %/.test(page.bodyText), "run: the summary gives the final accuracy in percent");
}

// A stream run's report: its charts against events trained and wall time with the data of
// metrics.jsonl, a drift marker per drift_detected event, and the sentences of the summary.
function checkStream(page, runDir) {
  const metrics = readJsonLines(path.join(runDir, "metrics.jsonl")).filter((m) => m.events_trained > 0);
  const events = readJsonLines(path.join(runDir, "events.jsonl"));
  const summary = JSON.parse(fs.readFileSync(path.join(runDir, "summary.json"), "utf8"));
  const count = (x, y) => metrics.filter((m) => finite(m[x]) && finite(m[y])).length;
  const expected = {
    "stream-loss": { "training loss (latest windows)": count("events_trained", "loss") },
    "stream-accuracy": {
      "latest events": count("events_trained", "recent_accuracy"),
      "whole stream so far": count("events_trained", "prequential_accuracy"),
    },
    "stream-rate": { "events trained per second": count("wall_s", "trained_per_s") },
    "stream-backlog": {
      "lag (not yet handed out)": count("wall_s", "lag"),
      "pending (not acknowledged)": count("wall_s", "pending"),
    },
  };
  check(metrics.length > 0, "stream: metrics.jsonl has lines with events trained");
  const drifts = events.filter((e) => e.event === "drift_detected").length;
  check(drifts > 0, `stream: the run detected a drift (${drifts} drift_detected events) to mark`);
  for (const [kind, series] of Object.entries(expected)) {
    const charts = page.charts.filter((c) => c.kind === kind);
    check(charts.length === 1 && charts[0].rendered, `stream: the chart ${kind} is drawn`);
    if (charts.length !== 1) continue;
    checkSeries("stream", charts[0], series);
    checkTicks("stream", charts[0]);
    check(
      (charts[0].markers["drift-marker"] ?? 0) === drifts,
      `stream ${kind}: ${drifts} drift marker(s)`,
      `drawn: ${charts[0].markers["drift-marker"]}`,
    );
  }
  check(!page.refresh && page.state === summary.state, `stream: a finished run's report no longer reloads (state ${summary.state})`);
  check(!/\{"|":\s*[\[{"]/.test(page.bodyText), "stream: no raw JSON on the page");
  check(/[\d,]+ events trained by \d+ replica\(s\)/.test(page.bodyText), "stream: the summary says how many events were trained");
  check(/Every replica applied every one of the [\d,]+ gradients once/.test(page.bodyText), "stream: the summary says apply-once held");
}

function checkSweep(page, out) {
  const sweep = JSON.parse(fs.readFileSync(path.join(out, "sweep.json"), "utf8"));
  const results = readCsv(path.join(out, "results.csv"));
  const summary = readCsv(path.join(out, "summary.csv"));
  const cells = sweep.cells.map((c) => c.name);
  // The run curves: one per run with an evaluation, as many vertices as evaluations.
  const curves = {};
  for (const r of results) {
    const metrics = readJsonLines(path.join(out, "runs", r.cell, `seed-${r.seed}`, "metrics.jsonl"));
    const n = metrics.filter((m) => finite(m.wall_s) && finite(m.val_acc)).length;
    if (n > 0) curves[`${r.cell} seed ${r.seed}`] = n;
  }
  const curveCharts = page.charts.filter((c) => c.kind === "curves");
  check(curveCharts.length === 1 && curveCharts[0].rendered, "sweep: the accuracy curves are drawn");
  if (curveCharts.length === 1) {
    checkSeries("sweep", curveCharts[0], curves);
    checkTicks("sweep", curveCharts[0]);
  }
  const forests = {
    "forest-accuracy": "final_val_acc",
    "forest-wall": "wall_s",
    "forest-switch": "switch_epoch",
  };
  if (sweep.target_accuracy !== undefined && sweep.target_accuracy !== null) forests["forest-target"] = "time_to_target_s";
  for (const [kind, metric] of Object.entries(forests)) {
    const charts = page.charts.filter((c) => c.kind === kind);
    check(charts.length === 1 && charts[0].rendered, `sweep: the chart ${kind} is drawn`);
    if (charts.length !== 1) continue;
    const chart = charts[0];
    const values = Object.fromEntries(
      cells.map((cell) => [
        cell,
        results.filter((r) => r.cell === cell && r.state === "succeeded" && r[metric] !== "" && Number.isFinite(+r[metric])).map((r) => +r[metric]),
      ]),
    );
    const all = Object.values(values).flat();
    if (all.length === 0) {
      check(chart.empty !== null && chart.rows.length === 0, `sweep ${kind}: says that no cell has a value`);
      continue;
    }
    check(
      JSON.stringify(chart.rows.map((r) => r.cell)) === JSON.stringify(cells),
      `sweep ${kind}: a row per cell, in order`,
      `rows: ${chart.rows.map((r) => r.cell).join(", ")}`,
    );
    for (const row of chart.rows) {
      const n = values[row.cell]?.length ?? -1;
      check(
        row.n === n && row.runs === n && row.means === (n > 0 ? 1 : 0) && row.intervals === (n >= 2 ? 1 : 0),
        `sweep ${kind} ${row.cell}: ${n} run(s), the mean${n >= 2 ? " and its interval" : ""} drawn ("${row.value}")`,
        JSON.stringify(row),
      );
      check(row.baseline === (row.cell === sweep.baseline), `sweep ${kind} ${row.cell}: baseline marked only on ${sweep.baseline}`);
      if (n === 1) check(/n = 1: no interval/.test(row.value), `sweep ${kind} ${row.cell}: says why there is no interval`);
    }
    check(chart.baselineLines === ((values[sweep.baseline] ?? []).length > 0 ? 1 : 0), `sweep ${kind}: the baseline's mean marked`);
    checkTicks("sweep", chart);
    // Fitted: the axis spans the values and the means' intervals (as far as the metric goes, 0 at
    // least) with less than a tick step to spare on each side, never a range from zero around
    // values far from it.
    let lo = Math.min(...all), hi = Math.max(...all);
    for (const s of summary.filter((r) => r.metric === metric && +r.n > 0)) {
      const half = s.ci95_half_width === "" ? 0 : +s.ci95_half_width;
      lo = Math.min(lo, Math.max(0, +s.mean - half));
      hi = Math.max(hi, metric === "final_val_acc" ? Math.min(1, +s.mean + half) : +s.mean + half);
    }
    const ticks = chart.xTicks.map((t) => parseFloat(t.replace(/,/g, "")));
    const step = ticks[1] - ticks[0];
    check(
      ticks[0] <= lo + 1e-9 && ticks[0] > lo - step - 1e-9 && ticks.at(-1) >= hi - 1e-9 && ticks.at(-1) < hi + step + 1e-9,
      `sweep ${kind}: the axis is fitted to the data (${chart.xTicks[0]} to ${chart.xTicks.at(-1)} for ${lo.toPrecision(3)} to ${hi.toPrecision(3)})`,
    );
  }
  if (page.varianceIntervals !== null) {
    const bad = page.varianceIntervals.filter((t) => !/^\S+ to \S+|no interval/.test(t) || t.includes("--"));
    check(
      bad.length === 0,
      `sweep: ${page.varianceIntervals.length} bootstrap interval(s) written as numbers or with the reason there is none ("${page.varianceIntervals[0]}")`,
      bad.join("; "),
    );
  }
  const means = page.meanIntervals ?? [];
  const badMeans = means.filter((t) => !/ to |no interval|no runs/.test(t) || t.includes("--"));
  check(
    means.length > 0 && badMeans.length === 0,
    `sweep: ${means.length} intervals of means written as numbers or with the reason there is none`,
    badMeans.join("; "),
  );
}

const args = parseArgs(process.argv.slice(2));
fs.mkdirSync(args.out, { recursive: true });
const chromiumPath = process.env.STRATA_CHROMIUM || "/usr/bin/chromium";
// A fresh profile each time, so that nothing from an earlier run (cache, settings) counts.
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "strata-report-browser-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: chromiumPath,
  headless: true,
  args: CHROMIUM_FLAGS,
});
try {
  if (args.run) checkRun(await openReport(context, path.join(args.run, "report.html"), "run-report", args.out), args.run);
  if (args.stream) {
    checkStream(await openReport(context, path.join(args.stream, "report.html"), "stream-report", args.out), args.stream);
  }
  if (args.sweep) {
    checkSweep(await openReport(context, path.join(args.sweep, "report.html"), "sweep-report", args.out), args.sweep);
  }
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
console.log(`report-browser: ${checks - failures.length} passed, ${failures.length} failed`);
process.exit(failures.length === 0 ? 0 : 1);
