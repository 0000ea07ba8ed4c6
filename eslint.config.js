import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', 'data/', 'sdk/dist/', 'sdk/src/generated/', 'test/screenshots/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // Tests read JSON bodies of many shapes; typing each one would add noise, not safety.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // The command's launcher is plain JavaScript for any Node (it finds the one to run the TypeScript on).
    files: ['bin/**/*.js'],
    languageOptions: { globals: globals.node },
  },
  {
    // The dashboard's ES modules run in the browser, served as they are (no build step).
    files: ['dashboard/**/*.js'],
    languageOptions: { globals: globals.browser, sourceType: 'module' },
  },
);
