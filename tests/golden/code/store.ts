/**
 * A small typed event store. Written for chunkline's tests: realistic shape, not a
 * published package.
 */
import { EventEmitter } from "events";

export interface Event<T = unknown> {
  id: string;
  type: string;
  payload: T;
  at: Date;
}

export type Reducer<S, T> = (state: S, event: Event<T>) => S;

export namespace Store {
  export interface Options {
    capacity: number;
    onEvict?: (event: Event) => void;
  }

  /** Keeps the latest events and folds them into a state. */
  export class Memory<S> extends EventEmitter {
    private readonly events: Event[] = [];

    constructor(private state: S, private readonly reducer: Reducer<S, unknown>, private readonly options: Options) {
      super();
    }

    append(event: Event): void {
      this.events.push(event);
      if (this.events.length > this.options.capacity) {
        const evicted = this.events.shift();
        if (evicted && this.options.onEvict) {
          this.options.onEvict(evicted);
        }
      }
      this.state = this.reducer(this.state, event);
      this.emit("append", event);
    }

    get current(): S {
      return this.state;
    }

    since(at: Date): Event[] {
      const matches = (event: Event) => event.at.getTime() >= at.getTime();
      return this.events.filter(matches);
    }
  }
}

export const countByType: Reducer<Record<string, number>, unknown> = (state, event) => {
  const next = { ...state };
  next[event.type] = (next[event.type] ?? 0) + 1;
  return next;
};

export function describe(event: Event): string {
  return `${event.type} #${event.id} à ${event.at.toISOString()}`;
}
