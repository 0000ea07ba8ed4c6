// libmime (the MIME word codec mailparser uses) ships no types; the tests use one function of it.
declare module 'libmime' {
  const libmime: {
    /** Decodes the RFC 2047 encoded-words in a header value. */
    decodeWords(value: string): string;
  };
  export default libmime;
}
