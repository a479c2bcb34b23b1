"""What tests/docs/doc_commands_test.py does with each command and output line the docs show.

TABLE is keyed by the exact text of the line as the docs show it (a `$ ` prompt and a trailing `# comment`
dropped; a continued command joined into one line). doc_commands_test.py's docstring says what each
class means; run()'s says what a `run` entry can check. A command that the docs gain needs an entry
here, and one that they lose takes its entry away: the test fails until the two agree.
"""


def run(exit=0, token=False, replace=(), stdout=None, stderr=None, summary=False, repeat=False, files=(),
        json_line=None, one_line=False, numbers=False, adapt_shown=None, timeout=60):
    """A command to run for real.

    token: the daemon wants an admin token for Admin calls; the command, shown without one, gets it from
      AUTOUVM_ADMIN_TOKEN as a user who has it would.
    replace: (doc text, text here) pairs; {addr} and {token_file} name the test's daemon and token file.
    stdout, stderr: regular expressions that must match somewhere in them (re.M).
    summary: stderr is exactly the summary line whose form docs/cli.md shows (generate in text mode).
    repeat: run it twice; stdout must be the same (greedy, or sampled with --seed).
    files: paths, relative to the command's directory, that it must have written.
    json_line: stdout is one JSON object; these dotted keys must have these values (None: be there).
    one_line: stdout is one line of text and its newline (what --stop $'\\n' asks for).
    numbers: the shown output's numbers, and the spaces that align them, may differ.
    adapt_shown: {line the doc shows: regular expression the output's line must match here}.
    """
    return dict(cls='run', exit=exit, token=token, replace=replace, stdout=stdout, stderr=stderr,
                summary=summary, repeat=repeat, files=files, json_line=json_line, one_line=one_line,
                numbers=numbers, adapt_shown=adapt_shown or {}, timeout=timeout)


def synopsis(help_command):
    """A usage line; every --flag in it must appear in the output of help_command (a doc-style command)."""
    return dict(cls='synopsis', help=help_command)


def elsewhere(reason, help_command=None):
    return dict(cls='elsewhere', reason=reason, help=help_command)


def config_error(yaml_text):
    return dict(cls='config_error', yaml=yaml_text)


def log(scenario, reason):
    return dict(cls='log', scenario=scenario, reason=reason)


SERVER_STATUS_HERE = {
    'admin_auth: false': r'admin_auth: true',  # the test's daemon has an admin token
    'metrics_address: 127.0.0.1:9090': r'metrics_address: 127\.0\.0\.1:\d+',  # port 0: the kernel's pick
}
MODELS_TABLE = r'^NAME +STATE +DTYPE +PARAMS +MAX_SEQ +ACTIVE/QUEUED\ntiny-llama +READY +fp32 +\S+ +512 +\d+/\d+$'
TOKEN_FILE_HERE = (('/etc/autouvm/admin.token', '{token_file}'),)

TABLE = {
    # README.md
    './tools/run.sh': elsewhere('the harness: installs packages, builds, and runs a daemon on 127.0.0.1:50051 '
                                'until it is stopped; this test starts the daemon it needs'),
    './tools/test.sh': elsewhere('the harness: builds and runs every test, this one included'),
    'build/clients/autouvm-cli health': run(stdout=r'\ASERVING\n\Z'),
    'build/clients/autouvm-cli models': run(token=True, stdout=MODELS_TABLE),
    'build/clients/autouvm-cli generate --model tiny-llama --prompt "Hello" --max-tokens 32 --temperature 0':
        run(summary=True, repeat=True, stderr=r' prompt_tokens=6 '),
    'build/clients/autouvm-cli generate --model tiny-llama --prompt "Hello" --temperature 0.8 --top-p 0.9 --seed 7':
        run(summary=True, repeat=True),

    # docs/autouvm-sim.md
    'autouvm-sim record --model DIR [--batch B] [--prompt-len L] [--phase decode|prefill] --out FILE':
        synopsis('autouvm-sim record --help'),
    'autouvm-sim replay --trace FILE [--gpu NAME[,NAME...]] [--gpu-specs YAML] '
    '[--oversubscription F[,F...] | --device-gib G] [--policy stock|paper|autouvm] [--iterations N] '
    '[--emulated-eviction] [--top-ops N] [--show-plan N] [--coded-ratio R [--decode-gb-per-s G]]':
        synopsis('autouvm-sim replay --help'),

    # docs/cli.md
    'autouvm-cli [--addr HOST:PORT] [--timeout SECONDS] [--token-file PATH] [--tls | --tls-ca PEM] '
    '[--tls-cert PEM --tls-key PEM] [--tls-server-name NAME] <command> [options]':
        synopsis('autouvm-cli --help'),
    'autouvm-cli --addr autouvmd.example:50051 --tls-ca ca.crt --tls-cert me.crt --tls-key me.key models':
        elsewhere('a TLS daemon at a remote host, with its CA and a client certificate; '
                  'tests/e2e/tls_e2e_test.cc runs these options against a TLS daemon', 'autouvm-cli --help'),
    'autouvm-cli models': run(exit=1),  # the doc's example of a call without the token
    'autouvm-cli --token-file /etc/autouvm/admin.token models': run(replace=TOKEN_FILE_HERE, stdout=MODELS_TABLE),
    'AUTOUVM_ADMIN_TOKEN=$(cat /etc/autouvm/admin.token) autouvm-cli server':
        run(replace=TOKEN_FILE_HERE, stdout=r'^admin_auth: true$'),
    'autouvm-cli generate --model nope --prompt hi': run(exit=1),
    'autouvm-cli health --addr 127.0.0.1:1 --timeout 2': run(exit=1),
    'autouvm-cli generate --model NAME (--prompt TEXT | --token-ids 1,2,3) [--max-tokens N] [--temperature F] '
    '[--top-k N] [--top-p F] [--repetition-penalty F] [--seed N] [--stop STR]... [--stop-token-id N]... '
    '[--ignore-eos] [--no-bos] [--request-id ID] [--logprobs N] [--unary] [--json]':
        synopsis('autouvm-cli generate --help'),
    'autouvm-cli generate --model tiny-llama --prompt "Once upon a time" --max-tokens 32 --temperature 0':
        run(summary=True, repeat=True),
    'autouvm-cli generate --model tiny-llama --token-ids 256,72,105 --max-tokens 8 --unary --json':
        run(stderr=r'\A\Z', json_line={'model': 'tiny-llama', 'usage.promptTokens': 3,
                                       'usage.completionTokens': None, 'finishReason': None, 'requestId': None}),
    'autouvm-cli generate --model tiny-llama --token-ids 256,72,105 --max-tokens 4 --temperature 0 --logprobs 2 '
    '--unary --json':
        run(stderr=r'\A\Z', stdout=r'"logprobs":\[\{"tokenId":\d+,"logprob":-?[\d.e-]+,"top":\[\{"tokenId"',
            json_line={'model': 'tiny-llama', 'usage.completionTokens': 4, 'logprobs': None}),
    "autouvm-cli --timeout 0 generate --model tiny-llama --prompt $'Q: 2+2?\\nA:' --stop $'\\n' --seed 7":
        run(summary=True, one_line=True, repeat=True),
    "autouvm-cli status tiny-llama | grep '^state:'": run(token=True),
    'autouvm-cli status nope': run(token=True, exit=1),
    # The model goes and comes back before the commands after these need it.
    'autouvm-cli unload tiny-llama': run(token=True),
    'autouvm-cli load tiny-llama': run(token=True),
    # Asleep, then woken: it serves the commands after these either way.
    'autouvm-cli sleep tiny-llama': run(token=True),
    'autouvm-cli wake tiny-llama': run(token=True),
    'autouvm-cli server': run(token=True, adapt_shown=SERVER_STATUS_HERE),
    'autouvm-cli profiles show MODEL (--key KEY | --phase prefill|decode --batch N [--prompt-len N]) '
    '[--full] [--json]':
        synopsis('autouvm-cli profiles show --help'),
    # Both replicas are the test's daemon: the import finds every entry stored already.
    'autouvm-cli --addr replica-a:50051 profiles export tiny-llama -o tiny-llama.bundle':
        run(token=True, replace=(('replica-a:50051', '{addr}'),), files=('tiny-llama.bundle',),
            adapt_shown={'exported 6 entries to tiny-llama.bundle':
                         r'exported \d+ entr(y|ies) to tiny-llama\.bundle'}),
    'autouvm-cli --addr replica-b:50051 profiles import tiny-llama.bundle':
        run(token=True, replace=(('replica-b:50051', '{addr}'),),
            stdout=r'\Aimported: \d+\nskipped: \d+\nerrors: 0\n\Z'),
    'until autouvm-cli health --timeout 1 >/dev/null 2>&1; do sleep 0.2; done': run(timeout=30),
    # The doc's run is 300 s (bench/results/); here 2 s shows that its options and its report are as shown.
    'autouvm-cli bench --model tiny-llama --concurrency 32 --duration 300 --max-tokens 24 --prompt-words 12 '
    '--cancel-rate 0.25':
        run(replace=(('--duration 300', '--duration 2'),), numbers=True, timeout=120),

    # docs/configuration.md
    "[...] [error] autouvmd: invalid configuration: my.yaml: server.drain_timeout: '30' has no unit (ms, s, m or h): "
    'expected a duration such as 30s, 500ms or 2m':
        config_error('server:\n  drain_timeout: 30\n'),
    '[...] [error] autouvmd: invalid configuration: my.yaml: model_defaults.max_batch: value 0 is outside [1, 4096]':
        config_error('model_defaults:\n  max_batch: 0\n'),
    '[...] [error] autouvmd: invalid configuration: my.yaml: server.lisen: unknown key':
        config_error('server:\n  lisen: 127.0.0.1:50051\n'),
    '[...] [error] autouvmd: invalid configuration: my.yaml: models.tiny-llama.max_batch: given twice '
    '(a key may appear once in its mapping)':
        config_error('models:\n  tiny-llama:\n    max_batch: 16\n    max_batch: 4\n'),

    # docs/model-contract.md
    'build/tools/autouvm-mkmodel --repo models --name my-model --dim 512 --layers 8 --heads 8 --kv-heads 2 '
    '--ffn-dim 1376 --vocab-size 320 --max-seq 1024 --dtype bf16 --seed 1':
        run(files=('models/my-model/model.pt', 'models/my-model/model.yaml'),
            stdout=r'^wrote models/my-model/model\.pt and model\.yaml$'),
    'build/tools/autouvm-convert --hf ~/Llama-2-7b-hf --repo models --name llama-2-7b [--max-seq 4096] '
    '[--dtype bf16]':
        elsewhere('a Hugging Face checkpoint (~/Llama-2-7b-hf, 13 GB); tests/e2e/convert_tool_test.cc '
                  'converts a small generated one', 'autouvm-convert --help'),

    # docs/profile-store.md
    '[...] [error] autouvmd: opening the profile store state/profiles: Corruption: ...; keeping profiles in memory only':
        log('corrupt_store', 'a daemon started on a profile store whose CURRENT file is garbage'),
    '[...] [info] autouvmd: profile store: memory':
        log('corrupt_store', 'a daemon started on a profile store whose CURRENT file is garbage'),

    # docs/development.md
    './tools/build.sh': elsewhere('the harness: installs packages and builds everything into ./build'),
    './tools/build.sh autouvmd autouvm-cli': elsewhere('the harness: installs packages and builds into ./build'),
    './tools/image-test.sh': elsewhere('builds the CPU container image with buildah and runs it '
                                       '(docs/deployment.md)'),
}
