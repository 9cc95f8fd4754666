// Opens tollgated's operator page in Debian's Chromium (driven by playwright-core) and checks
// what a person would: the members alive, the hot key first under its rule, numbers that move,
// a key's balance when typed in, and a hostile key shown as text. Saves screenshots.
//
//   node operator_page.mjs URL TOKEN_FILE OUTDIR RULE HOT_KEY HOSTILE_KEY MEMBERS
//
// Exit status 0 when every check held; otherwise 1 and what failed. operator_page_test.py runs it.
import { chromium } from "playwright-core";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const [url, tokenFile, outDir, rule, hotKey, hostileKey, membersText] = process.argv.slice(2);
const members = Number(membersText);
const token = readFileSync(tokenFile, "utf8").trim();
const WAIT_MS = 30000;

function fail(message) {
  throw new Error(message);
}

const browser = await chromium.launch({
  executablePath: process.env.TOLLGATE_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  // Root in a sandbox-less container; and nothing that reaches out of this closed machine.
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
let status = 0;
try {
  // A person answers the Basic prompt with any user name and the token as the password.
  const context = await browser.newContext({ httpCredentials: { username: "operator", password: token },
                                             viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const dialogs = [];
  page.on("dialog", async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => {
    // The first load is answered 401 with Basic's challenge, which the browser then answers, as
    // for a person; Chromium logs that 401. Any other error counts.
    const challenge = m.location().url === url && m.text().includes("401");
    if (m.type() === "error" && !challenge) errors.push(m.text() + " (" + m.location().url + ")");
  });

  const response = await page.goto(url);
  if (!response || response.status() !== 200) fail("the page answered " + (response && response.status()));

  // 1. Every member alive.
  await page.waitForFunction((n) => document.querySelectorAll("#members tr.member.alive").length === n, members,
                             { timeout: WAIT_MS });
  await page.screenshot({ path: join(outDir, "01-members.png"), fullPage: true });

  // 2. The hot key first under its rule, cluster-wide (this node sees it by gossip only).
  const firstKey = (r) => {
    const block = [...document.querySelectorAll("#top .rule-top")].find((b) => b.dataset.rule === r);
    const cell = block && block.querySelector("tr.top-key td.key");
    return cell ? cell.textContent : null;
  };
  try {
    await page.waitForFunction(([r, k]) => {
      const block = [...document.querySelectorAll("#top .rule-top")].find((b) => b.dataset.rule === r);
      const cell = block && block.querySelector("tr.top-key td.key");
      return cell !== null && cell !== undefined && cell.textContent === k;
    }, [rule, hotKey], { timeout: WAIT_MS });
  } catch (e) {
    fail("the top of " + rule + " is " + JSON.stringify(await page.evaluate(firstKey, rule)) + ", not " + hotKey);
  }
  await page.screenshot({ path: join(outDir, "02-top.png"), fullPage: true });

  // 3. The numbers move between two looks: the rule's cluster-wide denials, and this node's checks.
  const look = () => page.evaluate((r) => {
    const block = [...document.querySelectorAll("#top .rule-top")].find((b) => b.dataset.rule === r);
    const row = [...document.querySelectorAll("#rules tbody tr")].find((t) => t.dataset.rule === r);
    return { denied: block ? block.querySelector(".summary").textContent : "", checks: row ? row.querySelector(".checks").textContent : "",
             updated: document.getElementById("updated").textContent };
  }, rule);
  const first = await look();
  await page.waitForFunction((before) => document.getElementById("updated").textContent !== before &&
                             document.getElementById("updated").textContent !== "", first.updated, { timeout: WAIT_MS });
  await page.waitForFunction(([r, before]) => {
    const block = [...document.querySelectorAll("#top .rule-top")].find((b) => b.dataset.rule === r);
    return block && block.querySelector(".summary").textContent !== before;
  }, [rule, first.denied], { timeout: WAIT_MS });
  const second = await look();
  const deniedOf = (s) => Number(s.denied.split(" denied")[0].replace(/,/g, ""));
  if (!(deniedOf(second) > deniedOf(first))) fail("denials did not grow: " + first.denied + " then " + second.denied);
  if (!(Number(second.checks.replace(/,/g, "")) > 0)) fail("this node's checks/s under " + rule + " read " + second.checks);

  // 4. A key's balance, typed in.
  await page.fill("#balance-key", hotKey);
  await page.click("#balance-form button");
  await page.waitForFunction((k) => { const e = document.getElementById("balance-of"); return e && e.textContent === k; },
                             hotKey, { timeout: WAIT_MS });
  const balance = Number((await page.textContent("#balance-tokens")).replace(/,/g, ""));
  const debt = Number((await page.textContent("#balance-debt")).replace(/,/g, ""));
  await page.screenshot({ path: join(outDir, "03-balance.png"), fullPage: true });
  if (!(balance <= 20)) fail("the hot key's balance reads " + balance + ", above its burst");
  if (!(debt >= 0)) fail("the hot key's debt reads " + debt);

  // 5. A hostile key is text: it reads back verbatim and makes no element, no script run.
  await page.fill("#balance-key", hostileKey);
  await page.click("#balance-form button");
  await page.waitForFunction((k) => { const e = document.getElementById("balance-of"); return e && e.textContent === k; },
                             hostileKey, { timeout: WAIT_MS });
  const images = await page.evaluate(() => document.querySelectorAll("img").length);
  if (images !== 0) fail(images + " img elements: a key was rendered as markup");
  if (dialogs.length) fail("a dialog opened: " + dialogs.join("; "));
  await page.screenshot({ path: join(outDir, "04-hostile-key.png"), fullPage: true });
  if (errors.length) fail("the page logged errors: " + errors.join("; "));
  console.log("operator page: " + members + " members alive, " + hotKey + " first under " + rule + ", denials " +
              deniedOf(first) + " -> " + deniedOf(second) + ", balance " + balance + ", debt " + debt);
} catch (e) {
  console.error("operator page: " + e.message);
  status = 1;
} finally {
  await browser.close();
}
process.exit(status);
