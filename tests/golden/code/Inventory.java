/*
 * Inventory service of the warehouse example. Written for chunkline's tests: realistic
 * shape, not a published library.
 */
package com.example.warehouse;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/** Tracks stock per SKU and reserves it for orders. */
@SuppressWarnings("unused")
public class Inventory {
    private final Map<String, Integer> stock = new HashMap<>();
    private final List<Listener> listeners = new ArrayList<>();

    /** Something that wants to hear about stock changes. */
    public interface Listener {
        void changed(String sku, int before, int after);
    }

    /** A reservation held for one order until it ships or is cancelled. */
    public static final class Reservation {
        private final String sku;
        private final int quantity;

        Reservation(String sku, int quantity) {
            this.sku = sku;
            this.quantity = quantity;
        }

        public String sku() {
            return sku;
        }

        /** Returns the reserved units to stock, e.g. when the order is cancelled. */
        public void release(Inventory inventory) {
            inventory.add(sku, quantity);
        }
    }

    enum Level {
        EMPTY, LOW, OK;

        static Level of(int units) {
            if (units == 0) {
                return EMPTY;
            }
            return units < 10 ? LOW : OK;
        }
    }

    public Inventory() {
    }

    public void addListener(Listener listener) {
        listeners.add(listener);
    }

    public synchronized void add(String sku, int units) {
        int before = stock.getOrDefault(sku, 0);
        int after = before + units;
        stock.put(sku, after);
        for (Listener listener : listeners) {
            listener.changed(sku, before, after);
        }
    }

    /** Reserves units of sku, or returns empty when fewer are in stock — «rupture». */
    public synchronized Optional<Reservation> reserve(String sku, int units) {
        int before = stock.getOrDefault(sku, 0);
        if (before < units) {
            return Optional.empty();
        }
        stock.put(sku, before - units);
        listeners.forEach(l -> l.changed(sku, before, before - units));
        return Optional.of(new Reservation(sku, units));
    }

    Level level(String sku) {
        return Level.of(stock.getOrDefault(sku, 0));
    }
}
