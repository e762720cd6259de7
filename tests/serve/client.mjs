// A minimal second client of `hutch serve` (docs/machine.md, "hutch serve"),
// in Node (20+, no packages): runs one hutch command line on the server,
// passes its own stdin through, streams the command's stdout and stderr as
// they come, then prints the exit event (with the envelope) as the last
// line of stderr, prefixed "exit: ", and exits with the command's status.
//
//   node client.mjs HUTCH [--report-fd N] -- HUTCH-ARGS...
//   e.g. node client.mjs hutch --report-fd 3 -- run --quiet --result-fd 3 -- cat
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

const [hutch, ...rest] = process.argv.slice(2);
const dash = rest.indexOf("--");
const opts = rest.slice(0, dash);
const argv = rest.slice(dash + 1);
const reportFd = opts[0] === "--report-fd" ? Number(opts[1]) : undefined;

const server = spawn(hutch, ["serve"], { stdio: ["pipe", "pipe", "inherit"] });
const send = (msg) => server.stdin.write(JSON.stringify(msg) + "\n");
const id = 1;

createInterface({ input: server.stdout }).on("line", (line) => {
  const ev = JSON.parse(line);
  if (ev.event === "hello") {
    if (ev.protocol !== 1) throw new Error(`protocol ${ev.protocol}, expected 1`);
    send({ id, verb: "argv", argv, stdin: true, report_fd: reportFd, cwd: process.cwd() });
    process.stdin.on("data", (d) => send({ id, verb: "stdin", data: d.toString("base64") }));
    process.stdin.on("end", () => send({ id, verb: "stdin", eof: true }));
  } else if (ev.id !== id) {
    process.stderr.write(`unexpected event: ${line}\n`);
  } else if (ev.event === "stdout" || ev.event === "stderr") {
    process[ev.event].write(Buffer.from(ev.data, "base64"));
  } else if (ev.event === "exit" || ev.event === "error") {
    process.stderr.write(`exit: ${line}\n`);
    process.exitCode = ev.event === "exit" && ev.code !== null ? ev.code : 125;
    process.stdin.destroy();
    server.stdin.end(); // the server ends when its stdin closes
  }
});
