// The reputation breaker: the rates it judges a project and each of its sending domains on, over which
// window, from what volume, and what a pause holds.
import { boolean, duration, fraction, integer, section } from '../lib/settings.ts';

export const REPUTATION_SETTINGS = section('Reputation breaker', {
  reputation: {
    windowDays: integer('REPUTATION_WINDOW_DAYS', {
      default: 7,
      min: 1,
      max: 30,
      description: 'the rolling window the rates are measured over, in UTC days (today included)',
      details:
        "a week smooths a weekly campaign's peak without forgetting last week's bad list; a day at a time, like Gmail's Postmaster Tools",
    }),
    hardBounceWarning: fraction('REPUTATION_HARD_BOUNCE_WARNING', {
      default: 0.02,
      description: 'hard bounces per sent or bounced message past which `project.warning` is emitted',
    }),
    hardBounceLimit: fraction('REPUTATION_HARD_BOUNCE_LIMIT', {
      default: 0.05,
      description: 'hard bounces per sent or bounced message past which sending pauses',
    }),
    complaintWarning: fraction('REPUTATION_COMPLAINT_WARNING', {
      default: 0.001,
      description:
        "complaints per sent message past which `project.warning` is emitted (Gmail's 0.1 % advice)",
    }),
    complaintLimit: fraction('REPUTATION_COMPLAINT_LIMIT', {
      default: 0.003,
      description: "complaints per sent message past which sending pauses (Gmail's and Yahoo's 0.3 % limit)",
    }),
    minBounceVolume: integer('REPUTATION_MIN_BOUNCE_VOLUME', {
      default: 200,
      min: 1,
      max: 100_000_000,
      description: 'sent and bounced messages in the window before the hard-bounce rate is judged',
    }),
    minComplaintVolume: integer('REPUTATION_MIN_COMPLAINT_VOLUME', {
      default: 1000,
      min: 1,
      max: 100_000_000,
      description: 'sent messages in the window before the complaint rate is judged',
      details: 'at 1,000, three complaints do not pause a sender, four do',
    }),
    pauseAllSending: boolean('REPUTATION_PAUSE_ALL_SENDING', {
      default: false,
      description:
        'a pause holds every send, not only broadcasts; a project can say otherwise (`PATCH /v1/reputation`)',
    }),
    checkIntervalMs: duration('REPUTATION_CHECK_INTERVAL', {
      default: '1m',
      min: '1s',
      max: '1h',
      description: 'how often the workers judge the rates (a read of the daily counts, never of the emails)',
    }),
  },
});
