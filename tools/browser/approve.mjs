// Approve one pending action through SecureClaw's approvals page in headless chromium.
//
//   APPROVALS_TOKEN=<operator token> node tools/browser/approve.mjs <base url> <action id> <expected text>
//
// Opens <base url>/approvals, checks the login form, logs in with the operator token (from the
// environment, not argv), checks that the action's display text contains <expected text> and
// that the session cookie is HttpOnly and does not hold the token, clicks Approve, and checks
// the page's message. Fails on any console error (a Content-Security-Policy violation, for
// one). Uses Debian's chromium: $SECURECLAW_CHROMIUM or /usr/bin/chromium.
import { chromium } from "playwright-core";

const [base, actionId, expected] = process.argv.slice(2);
const token = process.env.APPROVALS_TOKEN;
if (!base || !actionId || !expected || !token) {
  console.error("usage: APPROVALS_TOKEN=… node approve.mjs <base url> <action id> <expected text>");
  process.exit(2);
}

function check(ok, what) {
  if (!ok) {
    throw new Error(`check failed: ${what}`);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.SECURECLAW_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  // Root in a CI container: chromium's sandbox needs user namespaces it may not have.
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
  timeout: 60_000,
});
let failed = false;
try {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  const consoleErrors = [];
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));

  const first = await page.goto(`${base}/approvals`);
  check(first.status() === 200, `GET /approvals answered ${first.status()}`);
  check((await page.locator("#token").count()) === 1, "a login form");
  check((await page.locator(`section[data-action-id="${actionId}"]`).count()) === 0, "no approvals before login");

  await page.fill("#token", token);
  // The form posts to /approvals/login, which answers 303 back to /approvals.
  await Promise.all([page.waitForNavigation(), page.click("#login")]);
  check(page.url() === `${base}/approvals`, `back on the list after login (${page.url()})`);
  check((await page.locator("#logout").count()) === 1, "logged in");
  const section = page.locator(`section[data-action-id="${actionId}"]`);
  check((await section.count()) === 1, `the pending action ${actionId} is listed`);
  const display = await section.locator("pre").innerText();
  check(display.includes(expected), `the display text contains ${expected}: ${display}`);

  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "secureclaw_approvals");
  check(session !== undefined, "a session cookie");
  check(session.httpOnly === true, "the cookie is HttpOnly");
  check(session.sameSite === "Strict", `the cookie is SameSite=Strict (${session.sameSite})`);
  check(session.path === "/approvals", `the cookie's path is /approvals (${session.path})`);
  check(!session.value.includes(token), "the cookie does not hold the token");
  check((await page.evaluate(() => document.cookie)) === "", "scripts cannot read the cookie");

  await Promise.all([page.waitForNavigation(), section.locator("button.approve").click()]);
  check(page.url() === `${base}/approvals`, `back on the list after approving (${page.url()})`);
  const flash = await page.locator("#flash").innerText();
  check(flash.includes(`Approved ${actionId}`), `the page says it approved: ${flash}`);
  check((await page.locator(`section[data-action-id="${actionId}"]`).count()) === 0, "the action left the list");
  check(consoleErrors.length === 0, `no console errors: ${consoleErrors.join(" | ")}`);
  console.log(JSON.stringify({ approved: actionId, flash }));
} catch (e) {
  failed = true;
  console.error(String(e && e.stack ? e.stack : e));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
