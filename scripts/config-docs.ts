// Writes docs/configuration.md from the configuration schema (src/config.ts); `--check` (run by
// `npm run check`) fails when the file is not what the schema gives, so the reference cannot go stale.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import prettier from 'prettier';
import { CONFIG_SCHEMA } from '../src/config.ts';
import { settingsByGroup } from '../src/lib/settings.ts';

const file = path.join(import.meta.dirname, '..', 'docs', 'configuration.md');

const cell = (text: string) => text.replaceAll('|', '\\|');

function render(): string {
  const parts = [
    '# Configuration',
    '',
    '<!-- Generated from src/config.ts by `npm run config:generate`; edit the schema, not this file. -->',
    '',
    'All configuration comes from the environment; a bad value stops the process with a message naming it. ' +
      'The `postwire` command reads the same settings (`postwire help settings` lists them). Durations are written ' +
      '`500ms`, `5s`, `5m`, `2h` or `1d`; booleans `true` or `false`.',
  ];
  for (const [group, settings] of settingsByGroup(CONFIG_SCHEMA)) {
    parts.push('', `## ${group}`, '', '| setting | default | description |', '| --- | --- | --- |');
    for (const setting of settings) {
      const names = setting.env.map((name) => `\`${name}\``).join(', ');
      const description = setting.details
        ? `${setting.description}. ${setting.details[0]!.toUpperCase()}${setting.details.slice(1)}`
        : setting.description;
      parts.push(`| ${names} | ${cell(setting.shownDefault)} | ${cell(description)} |`);
    }
  }
  return `${parts.join('\n')}\n`;
}

const options = (await prettier.resolveConfig(file)) ?? {};
const expected = await prettier.format(render(), { ...options, parser: 'markdown' });

if (process.argv.includes('--check')) {
  let current = '';
  try {
    current = readFileSync(file, 'utf8');
  } catch {
    // Missing counts as stale.
  }
  if (current !== expected) {
    process.stderr.write('docs/configuration.md is stale: run `npm run config:generate`.\n');
    process.exit(1);
  }
} else {
  writeFileSync(file, expected);
  process.stdout.write(`wrote ${path.relative(process.cwd(), file)}\n`);
}
