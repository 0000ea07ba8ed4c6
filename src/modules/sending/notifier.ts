// Sending workers wake the way delivery workers do: a Notifier (src/lib/notifier.ts) for emails accepted by
// this process, and PostgreSQL NOTIFY on their own channel for the others (SQLite workers in other processes
// poll).

/** The PostgreSQL channel an accepted email NOTIFYs and sending workers LISTEN on. */
export const SENDING_CHANNEL = 'postwire_sending';
