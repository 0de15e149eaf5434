/**
 * A dashboard widget that polls the fleet API. Written for chunkline's tests: realistic
 * shape, not a published package.
 */
import { fetchJson } from "./http.js";

const DEFAULT_INTERVAL_MS = 5000;

/** Formats a duration for humans: "3 min", "2 h 5 min". */
export function formatDuration(ms) {
  const minutes = Math.round(ms / 60000);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  return `${hours} h ${minutes % 60} min`;
}

export class FleetWidget {
  #timer = null;

  constructor(element, { interval = DEFAULT_INTERVAL_MS, endpoint = "/api/fleet" } = {}) {
    this.element = element;
    this.interval = interval;
    this.endpoint = endpoint;
  }

  start() {
    const tick = async () => {
      try {
        const fleet = await fetchJson(this.endpoint);
        this.render(fleet);
      } catch (error) {
        this.element.textContent = `Erreur : ${error.message} — réessai`;
      }
    };
    tick();
    this.#timer = setInterval(tick, this.interval);
  }

  stop() {
    clearInterval(this.#timer);
    this.#timer = null;
  }

  render(fleet) {
    const rows = fleet.robots.map((robot) => {
      const status = robot.online ? "online" : "offline";
      return `<tr><td>${robot.name}</td><td>${status}</td><td>${formatDuration(robot.uptimeMs)}</td></tr>`;
    });
    this.element.innerHTML = `<table>${rows.join("")}</table>`;
  }
}

export const summarize = (fleet) => ({
  total: fleet.robots.length,
  online: fleet.robots.filter((robot) => robot.online).length,
});
