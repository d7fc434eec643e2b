// The console in a real browser (Debian's Chromium, headless, driven by playwright-core),
// against a running gateway with a mock upstream. Started by the Rust test
// `console_browser` (tests/integration/console_browser.rs), which passes:
//   CONSOLE_URL  the console's address on the admin listener
//   GATEWAY_URL  the client listener, for chat requests with the key made in the console
//   ADMIN_TOKEN  the admin token
//   CHROMIUM     the browser executable (default /usr/bin/chromium)
//   SHOTS        where screenshots go (one per page)
// The mock upstream answers model `m1`, and fails model `broken` with a 500.
//
// It signs in, creates a key and reads it once, makes chat requests with it, sees them
// in the request list and in the spend chart, finds a request by the id in an error
// message, revokes the key and sees its next request refused. Then it creates a group
// with a daily budget and a key in it with a tpm and a day budget, makes a request, and
// sees every limit with what is used and left on the key's and the group's pages and the
// spend by group; edits, disables and deletes the group. Every wait has a deadline;
// any console error or Content-Security-Policy violation on the page fails the run.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const env = (k, d) => process.env[k] || d || assert.fail(`${k} is not set`);
const CONSOLE = env('CONSOLE_URL');
const GATEWAY = env('GATEWAY_URL');
const TOKEN = env('ADMIN_TOKEN');
const SHOTS = env('SHOTS', 'target/console-screenshots');
const DEADLINE_MS = 30_000;

mkdirSync(SHOTS, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'console-browser-'));
const problems = [];
let step = 'start';

const log = (s) => {
  step = s;
  console.log(`- ${s}`);
};

async function until(what, f) {
  const end = Date.now() + DEADLINE_MS;
  let last;
  for (;;) {
    try {
      const v = await f();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function chat(key, model) {
  const r = await fetch(`${GATEWAY}/v1/chat/completions`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }] }),
  });
  return { status: r.status, body: await r.json() };
}

const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
  viewport: { width: 1280, height: 860 },
  colorScheme: 'light',
});
await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(CONSOLE).origin });

try {
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(DEADLINE_MS);
  // The browser logs each refused API call ("Failed to load resource: … 401"); those are
  // this test's own doing. Anything else, a CSP violation above all, is a problem.
  await context.addInitScript(() =>
    document.addEventListener('securitypolicyviolation', (e) => console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`)),
  );
  page.on('console', (m) => {
    if (m.type() === 'error' && !/^Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) {
      problems.push(`console error at ${step}: ${m.text()}`);
    }
  });
  page.on('pageerror', (e) => problems.push(`page error at ${step}: ${e.message}`));
  const shot = (name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  const text = () => page.locator('body').innerText();
  const go = async (hash) => {
    await page.evaluate((h) => {
      location.hash = h;
    }, hash);
  };

  log('a wrong token is refused, in words');
  await page.goto(CONSOLE);
  await page.fill('input[name=token]', 'not-the-token');
  await page.click('button[type=submit]');
  await page.getByText('A valid admin token is required').waitFor();
  assert.match(await text(), /Sign-in refused/);
  await shot('signin');

  log('sign in: the token stays in this tab, no cookie');
  await page.fill('input[name=token]', TOKEN);
  await page.click('button[type=submit]');
  await page.getByText('No keys yet').waitFor();
  assert.equal(await page.evaluate(() => document.cookie), '');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('model-gateway.admin-token')), TOKEN);
  assert.equal(await page.evaluate(() => localStorage.length), 0);

  log('a refused field is named in words');
  await page.getByRole('button', { name: 'New key' }).click();
  await page.fill('#field-name', 'browser test');
  await page.fill('#field-models', 'm1\nbroken');
  await page.fill('#field-quota_usd', '5');
  await page.fill('#field-allow_ips', 'not-an-address');
  await page.getByRole('button', { name: 'Create key' }).click();
  await page.getByText('`not-an-address` is not an IP address or CIDR').first().waitFor();
  assert.match(await text(), /The key was not created/);

  log('create a key: shown once');
  await page.fill('#field-allow_ips', '');
  await page.getByRole('button', { name: 'Create key' }).click();
  const secret = await (await page.waitForSelector('#new-key')).inputValue();
  assert.match(secret, /^sk-/);
  await page.getByRole('button', { name: 'Copy' }).click();
  await page.getByRole('status').waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), secret, 'the copy button copies the key');
  await shot('key-created');
  await page.getByRole('button', { name: 'I have copied it' }).click();
  await page.locator('tr', { hasText: 'browser test' }).waitFor();
  const once = async (where, full = secret) => {
    const html = await page.content();
    assert.ok(!html.includes(full), `the full key is on the page: ${where}`);
    const stored = await page.evaluate(() => JSON.stringify({ ...sessionStorage, ...localStorage }));
    assert.ok(!stored.includes(full), `the full key is in storage: ${where}`);
  };
  await once('after the dialog closed');
  await page.reload();
  await page.locator('tr', { hasText: 'browser test' }).waitFor();
  await once('after a reload');
  assert.match(await text(), /\$0\.00 of \$5\.00/);
  await shot('keys');

  log('chat requests with the new key');
  for (let i = 0; i < 3; i++) {
    const r = await chat(secret, 'm1');
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  const failed = await chat(secret, 'broken');
  assert.equal(failed.status, 500);
  const message = failed.body.error.message;
  const failedId = message.match(/\(request id: ([0-9a-f]+)\)/)[1];

  log('the requests are in the list');
  await go('#/requests');
  await until('4 requests in the list', async () => {
    await page.getByRole('button', { name: 'Refresh' }).click();
    return (await page.locator('table[aria-label=Requests] tbody tr').count()) >= 4;
  });
  assert.equal(await page.locator(`tr[data-request-id="${failedId}"]`).count(), 1);
  assert.equal(await page.locator('table[aria-label=Requests] tbody tr', { hasText: 'm1' }).count(), 3);

  log('a request found by the id in its error message');
  await page.fill('input[name=request-id]', message);
  await page.getByRole('button', { name: 'Find' }).click();
  const rec = page.locator(`dl.record[data-request-id="${failedId}"]`);
  await rec.waitFor();
  const recText = await rec.innerText();
  assert.match(recText, /500/);
  assert.match(recText, /broken/);
  assert.match(recText, /browser test/);
  await shot('requests');

  log('an unknown id is answered in words');
  await page.fill('input[name=request-id]', '0000000000000000000000000000');
  await page.getByRole('button', { name: 'Find' }).click();
  await page.getByText('No usage record has the request id').waitFor();

  log('the spend chart holds them');
  await go('#/spend');
  await until('4 requests in the spend totals', async () => (await page.locator('[data-total=requests]').innerText()) === '4');
  await page.locator('.chart canvas').first().waitFor();
  assert.match(await page.locator('.chart .u-legend').innerText(), /m1/);
  assert.match(await page.locator('tr[data-group=m1]').innerText(), /3/);
  assert.match(await page.locator('tr[data-group=broken]').innerText(), /1/);
  assert.match(await text(), /left of \$5\.00/);
  await page.getByRole('button', { name: 'Tokens' }).click();
  await page.locator('.chart canvas').first().waitFor();
  await page.getByRole('button', { name: 'Cost' }).click();
  await once('spend');
  await shot('spend');

  log('by channel, and one key');
  await page.selectOption('select[aria-label="Group by"]', 'channel');
  await page.locator('tr[data-group=primary]').waitFor();
  const keyId = await page.evaluate(async (t) => {
    const r = await fetch('/admin/keys', { headers: { Authorization: `Bearer ${t}` } });
    return (await r.json()).data[0].id;
  }, TOKEN);
  await page.selectOption('select[aria-label=Key]', keyId);
  await page.locator('tr[data-budget-key]').waitFor();

  log('channels and prices from the configuration');
  await go('#/channels');
  const ch = page.locator('tr[data-channel=primary]');
  await ch.waitFor();
  assert.match(await ch.innerText(), /openai/);
  assert.match(await ch.innerText(), /m1/);
  await page.locator('tr[data-model=m1]').waitFor();
  const headers = await page.locator('table[aria-label=Channels] th').allInnerTexts();
  // The gateway reports channel health: a health column with each channel's circuit state.
  assert.ok(headers.some((h) => /health/i.test(h)), headers.join(','));
  assert.match(await ch.innerText(), /closed/);
  await shot('channels');

  log('a phone, in dark mode');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.emulateMedia({ colorScheme: 'dark' });
  await go('#/spend');
  await page.locator('.chart canvas').first().waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.ok(overflow <= 1, `the spend page scrolls sideways on a phone by ${overflow}px`);
  await shot('phone-dark-spend');
  await go('#/keys');
  await page.locator('tr', { hasText: 'browser test' }).waitFor();
  await shot('phone-dark-keys');
  await page.setViewportSize({ width: 1280, height: 860 });
  await page.emulateMedia({ colorScheme: 'light' });

  log('revoke the key, with confirmation');
  await page.locator('tr', { hasText: 'browser test' }).getByRole('button', { name: 'Revoke' }).click();
  await page.getByText('Revoke this key?').waitFor();
  await page.getByRole('dialog').getByRole('button', { name: 'Revoke' }).click();
  await page.getByText('No keys yet').waitFor();
  const after = await chat(secret, 'm1');
  assert.equal(after.status, 401, JSON.stringify(after.body));

  log('create a group with a daily budget');
  await go('#/groups');
  await page.getByText('No groups yet').waitFor();
  await page.getByRole('button', { name: 'New group' }).click();
  await page.fill('#field-id', 'team a');
  await page.fill('#field-name', 'Team A');
  await page.fill('#field-budget_day_usd', '1');
  await page.getByRole('button', { name: 'Create group' }).click();
  await page.locator('.field.invalid', { hasText: '`id` must be 1 to 64' }).waitFor();
  assert.match(await text(), /The group was not created/);
  await page.fill('#field-id', 'team-a');
  await page.getByRole('button', { name: 'Create group' }).click();
  await page.locator('tr[data-group-id=team-a]').waitFor();
  assert.match(await page.locator('tr[data-group-id=team-a]').innerText(), /Team A/);

  log('create a key in the group with a tpm and a day budget, through the form');
  await go('#/keys');
  await page.getByText('No keys yet').waitFor();
  await page.getByRole('button', { name: 'New key' }).click();
  await page.fill('#field-name', 'grouped key');
  await page.fill('#field-models', 'm1');
  await page.fill('#field-budget_day_usd', '2');
  await page.fill('#field-tpm', '100000');
  await page.fill('#field-max_concurrent', '4');
  await page.fill('#field-time_zone', 'Mars/Olympus');
  await until('the group among the choices', async () => (await page.locator('#field-group option[value=team-a]').count()) === 1);
  await page.selectOption('#field-group', 'team-a');
  await shot('key-form');
  await page.getByRole('button', { name: 'Create key' }).click();
  await page.getByText('`Mars/Olympus` is not a time zone').first().waitFor();
  await page.fill('#field-time_zone', 'UTC');
  await page.getByRole('button', { name: 'Create key' }).click();
  const grouped = await (await page.waitForSelector('#new-key')).inputValue();
  assert.match(grouped, /^sk-/);
  await page.getByRole('button', { name: 'I have copied it' }).click();
  const row = page.locator('tr', { hasText: 'grouped key' });
  await row.waitFor();
  assert.match(await row.innerText(), /team-a/);
  await once('the grouped key in the list', grouped);

  log('a chat request with it');
  const r = await chat(grouped, 'm1');
  assert.equal(r.status, 200, JSON.stringify(r.body));

  log('the key’s page: every limit, of the key and its group, with used and left');
  await row.getByRole('link', { name: 'Limits' }).click();
  const used = async (name) => page.locator(`table[aria-label="Key limits"] tr[data-limit="${name}"] td[data-used]`).innerText();
  await until('the request counted in the key’s day budget', async () => {
    await page.getByRole('button', { name: 'Refresh' }).click();
    return (await used('budget.day')) !== '$0.00' && (await used('group.budget.day')) !== '$0.00';
  });
  const keyLimits = await page.locator('table[aria-label="Key limits"]').innerText();
  for (const words of [/Daily budget/, /left of \$2\.00/, /Group: Daily budget/, /left of \$1\.00/, /Tokens per minute/, /left of 100,000 per minute/, /Concurrent requests/, /left of 4 at once/]) {
    assert.match(keyLimits, words);
  }
  assert.match(await page.locator('table[aria-label="Key limits"] tr[data-limit=tpm] td[data-used]').innerText(), /^[1-9][\d,]* tokens this minute$/);
  assert.match(await page.locator('dd[data-field=group]').innerText(), /team-a/);
  await once('the key’s page', grouped);
  await shot('key-limits');

  log('the group’s page: its limits with used and left, and its keys');
  await page.locator('dd[data-field=group] a').click();
  await page.locator('table[aria-label="Group limits"] tr[data-limit="group.budget.day"]').waitFor();
  const groupDay = await page.locator('table[aria-label="Group limits"] tr[data-limit="group.budget.day"]').innerText();
  assert.match(groupDay, /left of \$1\.00/);
  assert.doesNotMatch(await page.locator('table[aria-label="Group limits"] tr[data-limit="group.budget.day"] td[data-used]').innerText(), /^\$0\.00$/);
  assert.match(await page.locator('ul[aria-label="Keys in this group"]').innerText(), /grouped key/);
  await once('the group’s page', grouped);

  log('spend grouped by group, and filtered by group');
  await go('#/spend?group_by=group');
  await until('the group’s request in the totals', async () => (await page.locator('tr[data-group=team-a]').count()) === 1);
  assert.match(await page.locator('tr[data-group=team-a]').innerText(), /Team A\s+1\b/);
  await page.selectOption('select[aria-label=Group]', 'team-a');
  await until('one request for the group', async () => (await page.locator('[data-total=requests]').innerText()) === '1');
  await page.locator('table[aria-label="Group limits"] tr[data-limit="group.budget.day"]').waitFor();
  await page.locator('table[aria-label="Limits by key"] tr[data-limit="budget.day"]').waitFor();
  await once('spend by group', grouped);
  await shot('spend-by-group');

  log('the group’s requests');
  await go('#/requests?group=team-a');
  await until('one request of the group', async () => (await page.locator('table[aria-label=Requests] tbody tr').count()) === 1);
  assert.match(await page.locator('table[aria-label=Requests] tbody tr').innerText(), /grouped key/);

  log('the groups page, on a phone too');
  await go('#/groups');
  const groupRow = page.locator('tr[data-group-id=team-a]');
  await groupRow.waitFor();
  await page.fill('input[aria-label="Search groups"]', 'nothing like it');
  await page.getByText('No group matches').waitFor();
  await page.fill('input[aria-label="Search groups"]', 'team');
  await groupRow.waitFor();
  await shot('groups');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.emulateMedia({ colorScheme: 'dark' });
  await groupRow.waitFor();
  const groupsOverflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.ok(groupsOverflow <= 1, `the groups page scrolls sideways on a phone by ${groupsOverflow}px`);
  await shot('phone-dark-groups');
  await page.setViewportSize({ width: 1280, height: 860 });
  await page.emulateMedia({ colorScheme: 'light' });

  log('edit and disable the group; its key is refused while it is disabled');
  await groupRow.getByRole('button', { name: 'Edit' }).click();
  assert.ok(await page.locator('#field-id').evaluate((e) => e.readOnly), 'a group\'s id cannot change');
  await page.fill('#field-budget_week_usd', '5');
  await page.getByRole('button', { name: 'Save' }).click();
  await until('the weekly budget saved', async () => {
    const g = await page.evaluate(async (t) => (await fetch('/admin/groups/team-a', { headers: { Authorization: `Bearer ${t}` } })).json(), TOKEN);
    return g.budget_week_usd === 5 && g.budget_day_usd === 1;
  });
  await groupRow.getByRole('button', { name: 'Disable' }).click();
  await groupRow.getByText('disabled').waitFor();
  const refused = await chat(grouped, 'm1');
  assert.ok(refused.status >= 400, `a disabled group's key answered ${refused.status}`);
  await groupRow.getByRole('button', { name: 'Enable' }).click();
  await groupRow.getByText('enabled').waitFor();

  log('a group with keys is not deleted, and says why');
  await groupRow.getByRole('button', { name: 'Delete' }).click();
  await page.getByText('Delete this group?').waitFor();
  await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
  await page.getByText('still belong to group').waitFor();
  assert.match(await text(), /The group was not deleted/);
  await page.getByRole('button', { name: 'Keep it' }).click();

  log('revoke the key, then delete the group, with confirmation');
  await go('#/keys');
  await page.locator('tr', { hasText: 'grouped key' }).getByRole('button', { name: 'Revoke' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Revoke' }).click();
  await page.getByText('No keys yet').waitFor();
  await go('#/groups');
  await groupRow.getByRole('button', { name: 'Delete' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
  await page.getByText('No groups yet').waitFor();

  log('a token revoked while signed in leads back to the sign-in form');
  await go('#/channels');
  await page.locator('tr[data-channel=primary]').waitFor();
  await page.evaluate(() => sessionStorage.setItem('model-gateway.admin-token', 'stale'));
  await page.getByRole('button', { name: 'Refresh' }).click();
  await page.getByText('The admin token was refused: sign in again.').waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'a refused token is forgotten');

  assert.deepEqual(problems, [], 'the page logged errors');
  console.log('browser test passed');
} catch (e) {
  console.error(`failed at step "${step}": ${e.stack || e}`);
  if (problems.length) console.error(problems.join('\n'));
  process.exitCode = 1;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
