// Preact + htm: JSX-like templates with no build step. Served by Postwire from node_modules (see
// src/modules/dashboard/dashboard.routes.ts), so the versions are the ones package-lock.json pins.
import { h, render, Fragment } from '/dashboard/vendor/preact.js';
import htm from '/dashboard/vendor/htm.js';

export const html = htm.bind(h);
export { render, Fragment };
export { useState, useEffect, useRef, useCallback, useMemo } from '/dashboard/vendor/hooks.js';
