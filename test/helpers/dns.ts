import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, type Server, type Socket } from 'node:net';
import * as packet from 'dns-packet';

/** Record data as the test publishes it. */
export type TestRecord =
  | { type: 'A'; address: string }
  | { type: 'AAAA'; address: string }
  | { type: 'MX'; exchange: string; priority: number }
  | { type: 'TXT'; text: string }
  | { type: 'PTR'; name: string };

export interface TestDnsServer {
  /** The port it answers on, over UDP and TCP alike. */
  port: number;
  /** `127.0.0.1:<port>`, as DNS_SERVERS takes it. */
  address: string;
  /** Replaces the records of this type at `name` (none: removes them). */
  set(name: string, type: TestRecord['type'], records: TestRecord[]): void;
  /** Adds records at `name`. */
  add(name: string, ...records: TestRecord[]): void;
  /** Removes every record at `name`. */
  remove(name: string): void;
  /** Answers questions about `name` with SERVFAIL (a broken upstream), or normally again with `false`. */
  fail(name: string, failing?: boolean): void;
  /** Questions answered so far, with the transport they came over. */
  queries: Array<{ name: string; type: string; transport: 'udp' | 'tcp' }>;
  close(): Promise<void>;
}

// Answers longer than this over UDP, to a query that advertises no bigger size (EDNS), are truncated: the
// client asks again over TCP, as RFC 1035 §4.2.1 and RFC 7766 say.
const UDP_LIMIT = 512;

const canonical = (name: string) => name.toLowerCase().replace(/\.$/, '');

/**
 * A real authoritative DNS server on 127.0.0.1, UDP and TCP on one port, answering from the records a test
 * sets: NXDOMAIN for a name with no records (nor any below it), an empty answer (NODATA) for a name that
 * has records of other types.
 */
export async function startDnsServer(): Promise<TestDnsServer> {
  const zone = new Map<string, TestRecord[]>();
  const failing = new Set<string>();
  const queries: TestDnsServer['queries'] = [];

  function answer(query: packet.Packet, transport: 'udp' | 'tcp'): Buffer {
    const question = query.questions?.[0];
    const base = {
      type: 'response' as const,
      id: query.id ?? 0,
      flags: packet.AUTHORITATIVE_ANSWER | ((query.flags ?? 0) & packet.RECURSION_DESIRED),
      questions: query.questions ?? [],
    };
    if (!question) return packet.encode({ ...base, flags: base.flags | 1 }); // FORMERR
    const name = canonical(question.name);
    queries.push({ name, type: question.type, transport });
    if (failing.has(name)) return packet.encode({ ...base, flags: base.flags | 2 }); // SERVFAIL
    const records = zone.get(name) ?? [];
    const exists = records.length > 0 || [...zone.keys()].some((key) => key.endsWith(`.${name}`));
    if (!exists) return packet.encode({ ...base, flags: base.flags | 3 }); // NXDOMAIN
    const answers: packet.Answer[] = [];
    for (const record of records) {
      if (record.type !== question.type) continue;
      const common = { name: question.name, ttl: 60, class: 'IN' as const };
      if (record.type === 'A' || record.type === 'AAAA') {
        answers.push({ ...common, type: record.type, data: record.address });
      } else if (record.type === 'MX') {
        answers.push({
          ...common,
          type: 'MX',
          data: { exchange: record.exchange, preference: record.priority },
        });
      } else if (record.type === 'PTR') {
        answers.push({ ...common, type: 'PTR', data: record.name });
      } else {
        // A TXT record is a list of strings of at most 255 bytes each; long values are split.
        const bytes = Buffer.from(record.text);
        const chunks: Buffer[] = [];
        for (let at = 0; at < bytes.length || chunks.length === 0; at += 255)
          chunks.push(bytes.subarray(at, at + 255));
        answers.push({ ...common, type: 'TXT', data: chunks });
      }
    }
    const encoded = packet.encode({ ...base, answers });
    const advertised = query.additionals?.find((extra) => extra.type === 'OPT') as
      { udpPayloadSize?: number } | undefined;
    const limit = Math.max(UDP_LIMIT, advertised?.udpPayloadSize ?? 0);
    if (transport === 'udp' && encoded.length > limit) {
      return packet.encode({ ...base, flags: base.flags | packet.TRUNCATED_RESPONSE });
    }
    return encoded;
  }

  // UDP first on a free port, then TCP on the same one; another process may hold that TCP port: try again.
  let udp: UdpSocket | undefined;
  let tcp: Server | undefined;
  const sockets = new Set<Socket>();
  for (let tries = 0; !tcp; tries++) {
    udp = createSocket('udp4');
    const socket = udp;
    socket.on('message', (message, remote) => {
      let query: packet.Packet;
      try {
        query = packet.decode(message);
      } catch {
        return;
      }
      socket.send(answer(query, 'udp'), remote.port, remote.address);
    });
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
    const server = createTcpServer(sockets, answer);
    const bound = await new Promise<boolean>((resolve, reject) => {
      server.once('error', (error) => (tries >= 5 ? reject(error) : resolve(false)));
      server.listen(socket.address().port, '127.0.0.1', () => resolve(true));
    });
    if (bound) tcp = server;
    else await new Promise<void>((resolve) => socket.close(() => resolve()));
  }
  const port = udp!.address().port;
  const tcpServer = tcp;
  const udpSocket = udp!;

  return {
    port,
    address: `127.0.0.1:${port}`,
    queries,
    set(name, type, records) {
      const key = canonical(name);
      const kept = (zone.get(key) ?? []).filter((record) => record.type !== type);
      const all = [...kept, ...records.filter((record) => record.type === type)];
      if (all.length > 0) zone.set(key, all);
      else zone.delete(key);
    },
    add(name, ...records) {
      const key = canonical(name);
      zone.set(key, [...(zone.get(key) ?? []), ...records]);
    },
    remove(name) {
      zone.delete(canonical(name));
    },
    fail(name, fail = true) {
      if (fail) failing.add(canonical(name));
      else failing.delete(canonical(name));
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await Promise.all([
        new Promise<void>((resolve) => tcpServer.close(() => resolve())),
        new Promise<void>((resolve) => udpSocket.close(() => resolve())),
      ]);
    },
  };
}

/** The TCP side: messages carry a two-byte length before each (RFC 1035 §4.2.2). */
function createTcpServer(
  sockets: Set<Socket>,
  answer: (query: packet.Packet, transport: 'tcp') => Buffer,
): Server {
  return createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    let pending = Buffer.alloc(0);
    socket.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 2 && pending.length >= 2 + pending.readUInt16BE(0)) {
        const length = pending.readUInt16BE(0);
        const message = pending.subarray(2, 2 + length);
        pending = pending.subarray(2 + length);
        let reply: Buffer;
        try {
          reply = answer(packet.decode(message), 'tcp');
        } catch {
          socket.destroy();
          return;
        }
        const framed = Buffer.alloc(2 + reply.length);
        framed.writeUInt16BE(reply.length, 0);
        reply.copy(framed, 2);
        socket.write(framed);
      }
    });
  });
}
