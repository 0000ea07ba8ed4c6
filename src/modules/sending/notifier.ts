// Sending workers wake the same way delivery workers do: an in-process notifier for emails accepted by this
// process, and PostgreSQL NOTIFY on their own channel for the others (SQLite workers in other processes poll).
export {
  createDeliveryNotifier as createSendNotifier,
  type DeliveryNotifier as SendNotifier,
} from '../deliveries/notifier.ts';

/** The PostgreSQL channel an accepted email NOTIFYs and sending workers LISTEN on. */
export const SENDING_CHANNEL = 'postwire_sending';
