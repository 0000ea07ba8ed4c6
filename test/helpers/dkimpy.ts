import { spawn, spawnSync } from 'node:child_process';

// A second DKIM verifier, independent of the JavaScript ones (mailauth, nodemailer's signer): dkimpy, the
// Python library behind many receiving filters, run by Debian's python3 (python3-dkim). A signature both
// accept is not an artefact of sharing one implementation's reading of RFC 6376.

// Debian's interpreter by its path: a `python3` earlier on PATH (pyenv, a venv) does not see python3-dkim.
const PYTHON = '/usr/bin/python3';

// One process reads a JSON request on stdin, {messages: [base64...], keys: {name: txt}}, and writes one JSON
// array of {pass, detail}: message bytes never pass through a shell or a command line, and a batch costs
// one interpreter start. `-I` keeps the caller's PYTHONPATH and user site-packages out of it.
const SCRIPT = String.raw`
import base64, io, json, logging, sys
import dkim

request = json.load(sys.stdin)
# DNS names compare case-insensitively and dkimpy asks with a trailing dot ('s._domainkey.d.').
keys = {name.lower().rstrip('.'): txt for name, txt in request['keys'].items()}

def dnsfunc(name, timeout=5):
    if isinstance(name, bytes):
        name = name.decode('utf-8', 'replace')
    txt = keys.get(name.lower().rstrip('.'))
    return None if txt is None else txt.encode('utf-8')

logger = logging.getLogger('postwire-dkimpy-helper')
logger.setLevel(logging.DEBUG)
logger.propagate = False
LIMIT = 4000

results = []
for encoded in request['messages']:
    message = base64.b64decode(encoded)
    log = io.StringIO()
    logger.handlers = [logging.StreamHandler(log)]
    notes = []
    passed = False
    try:
        verifier = dkim.DKIM(message, logger=logger)
        count = sum(1 for name, _ in verifier.headers if name.lower() == b'dkim-signature')
        if count == 0:
            notes.append('no DKIM-Signature header')
        else:
            passed = True
            for index in range(count):
                try:
                    ok = verifier.verify(index, dnsfunc=dnsfunc)
                except Exception as error:
                    ok = False
                    notes.append('signature %d: %s: %s' % (index, type(error).__name__, error))
                else:
                    fields = verifier.signature_fields
                    which = 'signature %d (d=%s s=%s)' % (
                        index,
                        fields.get(b'd', b'?').decode('utf-8', 'replace'),
                        fields.get(b's', b'?').decode('utf-8', 'replace'),
                    )
                    notes.append(which + (': pass' if ok else ': did not verify'))
                passed = passed and bool(ok)
    except Exception as error:
        passed = False
        notes.append('%s: %s' % (type(error).__name__, error))
    detail = '; '.join(notes)
    if not passed and log.getvalue():
        detail += '\ndkimpy log:\n' + log.getvalue()
    if len(detail) > LIMIT:
        detail = detail[:LIMIT] + '... (cut)'
    results.append({'pass': passed, 'detail': detail})

json.dump(results, sys.stdout)
`;

let available: boolean | undefined;

/** Whether Debian's python3 is there and imports dkimpy (`apt-get install python3-dkim`). */
export function dkimpyAvailable(): boolean {
  available ??= spawnSync(PYTHON, ['-I', '-c', 'import dkim'], { stdio: 'ignore' }).status === 0;
  return available;
}

/**
 * Verifies each message's DKIM signatures with dkimpy; `keys` maps a DNS name (e.g.
 * 'sel._domainkey.acme.example') to its TXT record text, and is the only DNS there is (a name missing from
 * it has no key). A message passes when it has at least one DKIM-Signature and every one verifies;
 * `detail` says per signature what happened, and on failure carries dkimpy's exception text and log. One
 * python process for the whole batch, results in the order of `messages`.
 */
export async function dkimpyVerify(
  messages: Array<Buffer | string>,
  keys: Record<string, string>,
): Promise<Array<{ pass: boolean; detail: string }>> {
  const request = JSON.stringify({
    messages: messages.map((message) =>
      (typeof message === 'string' ? Buffer.from(message, 'utf8') : message).toString('base64'),
    ),
    keys,
  });
  const child = spawn(PYTHON, ['-I', '-c', SCRIPT], { stdio: ['pipe', 'pipe', 'pipe'] });
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
  child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
  // A python that dies early closes its stdin: the exit code and stderr below say why, not an EPIPE.
  child.stdin.on('error', () => {});
  child.stdin.end(request);
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });
  const errors = Buffer.concat(stderr).toString('utf8');
  if (code !== 0) throw new Error(`dkimpy verifier exited with ${code}: ${errors}`);
  const results = JSON.parse(Buffer.concat(stdout).toString('utf8')) as Array<{
    pass: boolean;
    detail: string;
  }>;
  if (results.length !== messages.length) {
    throw new Error(`dkimpy verifier answered ${results.length} of ${messages.length} messages: ${errors}`);
  }
  return results;
}
