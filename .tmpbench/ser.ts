import Fastify from 'fastify';
import { WebhookList } from '../src/modules/webhooks/webhooks.schemas.ts';
const now = new Date().toISOString();
const data = Array.from({ length: 20 }, (_, i) => ({ object: 'webhook', id: `wh_01kfa6zp3wexd1ytbq1g4s8v${String(i).padStart(2,'0')}`, url: `https://hooks.example.com/postwire/${i}`, events: ['email.sent','email.delivered','email.bounced'], enabled: true, created_at: now, updated_at: now, disabled_reason: null, has_secret: true }));
const payload = { object: 'list', data, has_more: false };
const app = Fastify();
app.get('/', { schema: { response: { 200: WebhookList } } }, async () => payload);
await app.ready();
// compile the serializer through the route
let ser: any;
app.addHook && null;
const res = await app.inject('/');
console.log(res.statusCode, res.body.length);
const { default: build } = await import('fast-json-stringify');
const s = build(WebhookList as any);
const t = (name: string, f: () => unknown) => { for (let i=0;i<20000;i++) f(); const a=process.hrtime.bigint(); for (let i=0;i<100000;i++) f(); console.log(name, (Number(process.hrtime.bigint()-a)/100000/1000).toFixed(2),'µs'); };
t('fjs', () => s(payload)); t('JSON.stringify', () => JSON.stringify(payload)); t('fjs', () => s(payload));
