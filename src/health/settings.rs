//! The spec's `diagnostics:` section as the signals read it: the window, and per signal (by its
//! key, which is the row's name) its action and its thresholds by name.
//!
//! Why a map and not the typed section itself: a row of the table names its key and its
//! thresholds, so a check reads `steps` of its own setting without a field access per signal
//! (one of the nine places a signal used to be added in), and a signal whose key the spec does
//! not have yet (a test's row) is configured the same way. The typed section stays the spec's:
//! it gives the schema, the defaults and the errors.

use std::collections::BTreeMap;

use crate::spec::health::{Action, Health};

/// One signal's setting: what firing does and its thresholds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Setting {
    pub(crate) action: Action,
    values: BTreeMap<String, f64>,
}

impl Setting {
    /// From the section's value for one key: `{steps: 5, action: warn}`. `None` when it is not
    /// an object of numbers and an action.
    pub(crate) fn from_json(v: &serde_json::Value) -> Option<Setting> {
        let mut values = BTreeMap::new();
        let mut action = Action::Warn;
        for (k, v) in v.as_object()? {
            if k == "action" {
                action = serde_json::from_value(v.clone()).ok()?;
            } else {
                values.insert(k.clone(), v.as_f64()?);
            }
        }
        Some(Setting { action, values })
    }

    /// Threshold `key`.
    pub(crate) fn get(&self, key: &str) -> Option<f64> {
        self.values.get(key).copied()
    }

    /// The thresholds' names.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }
}

/// The whole section.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    /// Steps a signal looks back over.
    pub(crate) window: u32,
    by_key: BTreeMap<String, Setting>,
}

impl Settings {
    /// The spec's section, every key with its value or default.
    pub(crate) fn of(h: &Health) -> Settings {
        let v = serde_json::to_value(h).expect("the diagnostics section serialises");
        let by_key = v.as_object().into_iter().flatten().filter_map(|(k, v)| Some((k.clone(), Setting::from_json(v)?))).collect();
        Settings { window: h.window, by_key }
    }

    /// Signal `name`'s setting, if the section has its key.
    pub(crate) fn get(&self, name: &str) -> Option<&Setting> {
        self.by_key.get(name)
    }

    /// Sets signal `name`'s setting (a key the spec does not have: a test's row).
    #[cfg(test)]
    pub(crate) fn set(&mut self, name: &str, setting: Setting) {
        self.by_key.insert(name.to_owned(), setting);
    }

    /// Every key with a setting.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.by_key.keys().map(String::as_str)
    }
}
