// The platform globals the client uses, present in browsers and Node >= 20 alike.
declare class TextEncoder {
  encode(input: string): Uint8Array;
}
declare var crypto: { getRandomValues<T extends Uint32Array>(array: T): T } | undefined;
declare class TextDecoder {
  constructor(label?: string, options?: { fatal?: boolean; ignoreBOM?: boolean });
  decode(input?: Uint8Array): string;
}
