// The OpenAI-compatible API (docs/openai-api.md) through the official `openai` npm client, against a
// running autouvmd. tests/e2e/openai_e2e_test.cc starts the daemon and runs this with node:
//
//   NODE_PATH=<build>/npm/node_modules node openai_client_test.js main  BASE_URL KEY MODEL
//   NODE_PATH=<build>/npm/node_modules node openai_client_test.js queue BASE_URL KEY MODEL METRICS_URL
//
// "main" checks the endpoints on a model with room for 32 streams; "queue" runs on a model with one slot
// and a queue of one (the 429 and the aborted stream). Each check prints "ok - <name>"; the first that
// fails prints why and the script exits 1.
'use strict';

const OpenAI = require('openai');
const assert = require('node:assert/strict');

const [mode, baseURL, apiKey, model, metricsURL] = process.argv.slice(2);
const client = new OpenAI({baseURL, apiKey, maxRetries: 0, timeout: 120000});

const checks = [];
function check(name, fn) {
  checks.push([name, fn]);
}

async function collectChat(params) {
  const stream = await client.chat.completions.create({...params, stream: true});
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

async function collectCompletion(params) {
  const stream = await client.completions.create({...params, stream: true});
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

async function expectError(promise, status, pattern) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
    assert.equal(e.status, status, `status ${e.status}: ${e.message}`);
    if (pattern) assert.match(e.message, pattern);
    return e;
  }
  assert.fail(`expected HTTP ${status}, the call succeeded`);
}

const greedy = {temperature: 0, max_tokens: 12, ignore_eos: true};

if (mode === 'main') {
  check('models list names the model', async () => {
    const list = await client.models.list();
    const ids = list.data.map((m) => m.id);
    assert.ok(ids.includes(model), `models: ${ids}`);
    const m = await client.models.retrieve(model);
    assert.equal(m.id, model);
    assert.equal(m.object, 'model');
  });

  check('completion, whole and streamed, greedy and equal', async () => {
    const whole = await client.completions.create({model, prompt: 'Hello', ...greedy});
    assert.equal(whole.object, 'text_completion');
    assert.equal(whole.choices.length, 1);
    assert.equal(whole.choices[0].finish_reason, 'length');
    assert.equal(whole.usage.completion_tokens, 12);
    assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + 12);
    const chunks = await collectCompletion({model, prompt: 'Hello', ...greedy});
    const text = chunks.map((c) => c.choices.map((x) => x.text).join('')).join('');
    assert.equal(text, whole.choices[0].text);
    assert.equal(chunks[chunks.length - 1].choices[0].finish_reason, 'length');
  });

  check('completion from token ids', async () => {
    const r = await client.completions.create({model, prompt: [72, 101, 108], ...greedy});
    assert.equal(r.usage.completion_tokens, 12);
  });

  check('chat, whole and streamed, greedy and equal', async () => {
    const messages = [{role: 'system', content: 'You are terse.'}, {role: 'user', content: 'Hi there'}];
    const whole = await client.chat.completions.create({model, messages, ...greedy});
    assert.equal(whole.object, 'chat.completion');
    assert.equal(whole.choices[0].message.role, 'assistant');
    assert.equal(typeof whole.choices[0].message.content, 'string');
    assert.equal(whole.usage.completion_tokens, 12);
    const chunks = await collectChat({model, messages, ...greedy});
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const text = chunks.map((c) => c.choices.map((x) => x.delta.content || '').join('')).join('');
    assert.equal(text, whole.choices[0].message.content);
    const last = chunks[chunks.length - 1];
    assert.equal(last.choices[0].finish_reason, 'length');
    assert.equal(last.object, 'chat.completion.chunk');
  });

  check('n = 2: two choices, each its own tokens', async () => {
    const r = await client.chat.completions.create({
      model, messages: [{role: 'user', content: 'Count'}], n: 2, temperature: 1, seed: 7, max_tokens: 8, ignore_eos: true});
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    assert.equal(r.usage.completion_tokens, 16);
    const chunks = await collectCompletion({model, prompt: 'Count', n: 2, temperature: 1, seed: 7, max_tokens: 8,
                                            ignore_eos: true});
    const ended = chunks.flatMap((c) => c.choices).filter((c) => c.finish_reason).map((c) => c.index).sort();
    assert.deepEqual(ended, [0, 1]);
  });

  check('seed: the same seed gives the same text', async () => {
    const params = {model, prompt: 'Once upon', temperature: 1, top_p: 0.9, seed: 1234, max_tokens: 16,
                    ignore_eos: true};
    const a = await client.completions.create(params);
    const b = await client.completions.create(params);
    assert.equal(a.choices[0].text, b.choices[0].text);
    const chat = {model, messages: [{role: 'user', content: 'x'}], temperature: 1, seed: 99, max_tokens: 16,
                  ignore_eos: true};
    const c = await client.chat.completions.create(chat);
    const d = await client.chat.completions.create(chat);
    assert.equal(c.choices[0].message.content, d.choices[0].message.content);
  });

  check('logprobs: completions and chat', async () => {
    const r = await client.completions.create({model, prompt: 'Hello', logprobs: 2, ...greedy});
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 12);
    assert.equal(lp.token_logprobs.length, 12);
    for (let i = 0; i < 12; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0, `logprob ${lp.token_logprobs[i]}`);
      const tops = Object.values(lp.top_logprobs[i]);
      assert.ok(tops.length >= 1 && tops.length <= 2, `top ${JSON.stringify(lp.top_logprobs[i])}`);
      // Greedy: no alternative is more likely than the token taken (tokens whose texts are the same,
      // bytes of a character, share one key of the legacy format: the check is one-sided).
      assert.ok(Math.max(...tops) <= lp.token_logprobs[i] + 1e-4, `${JSON.stringify(lp.top_logprobs[i])}`);
    }
    const c = await client.chat.completions.create({
      model, messages: [{role: 'user', content: 'Hello'}], logprobs: true, top_logprobs: 3, ...greedy});
    const content = c.choices[0].logprobs.content;
    assert.equal(content.length, 12);
    for (const t of content) {
      assert.equal(t.top_logprobs.length, 3);
      assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
      assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
      assert.ok(Array.isArray(t.bytes));
    }
  });

  check('stop: the text ends before the stop string', async () => {
    const whole = await client.completions.create({model, prompt: 'Hello', ...greedy, max_tokens: 24});
    const text = whole.choices[0].text;
    // A printable ASCII character past the start (the tiny model's bytes are mostly not UTF-8, shown
    // as U+FFFD, which is not what the daemon matches stop strings against).
    const at = [...text].findIndex((ch, i) => i >= 3 && ch >= '!' && ch <= '~');
    assert.ok(at >= 0, `no ASCII character in ${JSON.stringify(text)}`);
    const stop = [...text][at];
    const r = await client.completions.create({model, prompt: 'Hello', ...greedy, max_tokens: 24, stop: [stop]});
    assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
    assert.equal(r.choices[0].finish_reason, 'stop');
  });

  check('usage in the last chunk with stream_options.include_usage', async () => {
    const chunks = await collectChat({model, messages: [{role: 'user', content: 'Hi'}], ...greedy,
                                      stream_options: {include_usage: true}});
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 12);
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + 12);
    for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
  });

  check('a bad key gets 401', async () => {
    const bad = new OpenAI({baseURL, apiKey: 'not-the-key', maxRetries: 0});
    await expectError(bad.models.list(), 401);
    await expectError(bad.chat.completions.create({model, messages: [{role: 'user', content: 'x'}]}), 401);
  });

  check('an unknown model gets 404', async () => {
    const e = await expectError(client.completions.create({model: 'no-such-model', prompt: 'x'}), 404,
                                /no-such-model/);
    assert.equal(e.code, 'model_not_found');
  });

  check('a field this server does not implement gets 400 naming it', async () => {
    const e = await expectError(client.chat.completions.create({
      model, messages: [{role: 'user', content: 'x'}],
      tools: [{type: 'function', function: {name: 'f', parameters: {type: 'object'}}}]}), 400, /tools/);
    assert.equal(e.param, 'tools');
    const t = await expectError(client.completions.create({model, prompt: 'x', temperature: 5}), 400, /temperature/);
    assert.equal(t.param, 'temperature');
  });

  check('32 concurrent streams all complete', async () => {
    const runs = [];
    for (let i = 0; i < 32; ++i) {
      runs.push(collectChat({model, messages: [{role: 'user', content: `stream ${i}`}], max_tokens: 16,
                             ignore_eos: true, temperature: 0, stream_options: {include_usage: true}}));
    }
    const all = await Promise.all(runs);
    for (const chunks of all) {
      assert.equal(chunks[chunks.length - 1].usage.completion_tokens, 16);
    }
  });
} else if (mode === 'queue') {
  // One slot and a queue of one: a long stream runs, one request waits, the next is refused.
  check('a full queue gets 429, and an aborted stream frees its slot at once', async () => {
    const long = await client.completions.create({model, prompt: 'Long', max_tokens: 4000, ignore_eos: true,
                                                  temperature: 0, stream: true});
    const it = long[Symbol.asyncIterator]();
    await it.next();  // running: it holds the one slot
    const waiting = client.completions.create({model, prompt: 'Wait', max_tokens: 2, ignore_eos: true});
    // The daemon's own gauge says when it is queued (metricsURL: its /metrics).
    const queued = new RegExp(`^autouvm_requests_waiting\\{model="${model}"\\} 1(\\.0*)?$`, 'm');
    for (let i = 0; i < 600; ++i) {
      const text = await (await fetch(metricsURL)).text();
      if (queued.test(text)) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const refused = await expectError(client.completions.create({model, prompt: 'Third', max_tokens: 1}), 429);
    assert.equal(refused.code, 'queue_full');
    // Abort the long stream: the waiting request gets the slot and finishes well before the long one
    // would have (4000 tokens).
    const t0 = Date.now();
    long.controller.abort();
    const w = await waiting;
    assert.equal(w.usage.completion_tokens, 2);
    const next = await client.completions.create({model, prompt: 'Next', max_tokens: 2, ignore_eos: true});
    assert.equal(next.usage.completion_tokens, 2);
    console.log(`  the waiting and the next request were served ${Date.now() - t0} ms after the abort`);
    assert.ok(Date.now() - t0 < 10000, 'the aborted stream kept its slot');
  });
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}

(async () => {
  for (const [name, fn] of checks) {
    try {
      await fn();
      console.log(`ok - ${name}`);
    } catch (e) {
      console.log(`FAILED - ${name}: ${e && e.stack ? e.stack : e}`);
      process.exit(1);
    }
  }
  console.log(`all ${checks.length} checks passed`);
})();
