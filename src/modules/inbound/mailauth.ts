/**
 * mailauth, loaded on first use: with its dependencies (joi among them) it was a sixth of a server's start
 * (about 0.6 of 3.7 CPU-s, bench:start), paid by every process and thread that imports the authentication
 * modules, most of which never check a message. The first check pays it once.
 */
let loading: Promise<typeof import('mailauth')> | undefined;

export const loadMailauth = (): Promise<typeof import('mailauth')> => (loading ??= import('mailauth'));
