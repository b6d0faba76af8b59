#![allow(clippy::unwrap_used)]

use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::three_way::{FieldOwnership, plan};

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(second).unwrap())
}

fn object(name: &str) -> ConflictedObject {
    ConflictedObject {
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        tenant: TenantObjectRef {
            namespace: "default".into(),
            name: name.into(),
            uid: None,
        },
        host: HostTarget {
            namespace: "team-dev".into(),
            name: format!("{name}-x-default-x-dev"),
        },
    }
}

fn record(second: i64, resolution: ConflictResolution, detail: &str) -> ConflictRecord {
    ConflictRecord {
        time: at(second),
        fields: vec!["/spec/size".into()],
        policy: ConflictPolicy::Manual,
        resolution,
        detail: detail.into(),
    }
}

/// Tenant 3 and host 4 against base 1 under `policy`.
fn conflicting_plan(policy: ConflictPolicy) -> ThreeWayPlan {
    let base = [("/spec/size".to_owned(), json!(1))].into_iter().collect();
    plan(
        Some(&base),
        &json!({"spec": {"size": 3}}),
        &json!({"spec": {"size": 4}}),
        &FieldOwnership::bidirectional_default(),
        policy,
    )
}

#[test]
fn a_manual_conflict_is_left_alone_with_both_values() {
    let record = conflict_record(
        &conflicting_plan(ConflictPolicy::Manual),
        ConflictPolicy::Manual,
        at(1),
    )
    .unwrap();
    assert_eq!(record.resolution, ConflictResolution::LeftAlone);
    assert_eq!(record.fields, ["/spec/size"]);
    assert_eq!(
        record.detail,
        "/spec/size is 3 in the tenant and 4 on the host: left alone (manual)"
    );
}

#[test]
fn a_settled_conflict_names_the_winner_and_what_it_overwrote() {
    let record = conflict_record(
        &conflicting_plan(ConflictPolicy::HostWins),
        ConflictPolicy::HostWins,
        at(1),
    )
    .unwrap();
    assert_eq!(record.resolution, ConflictResolution::HostWon);
    assert_eq!(record.policy, ConflictPolicy::HostWins);
    assert!(
        record
            .detail
            .contains("the host's value overwrites the tenant's"),
        "{}",
        record.detail
    );
}

#[test]
fn a_pass_without_conflicts_has_no_conflict_record() {
    let plan = plan(
        None,
        &json!({"spec": {"size": 3}}),
        &json!({"spec": {"size": 3}}),
        &FieldOwnership::bidirectional_default(),
        ConflictPolicy::Manual,
    );
    assert_eq!(conflict_record(&plan, ConflictPolicy::Manual, at(1)), None);
    let resolved = resolved_record(&plan, ConflictPolicy::Manual, at(1));
    assert_eq!(resolved.detail, "the tenant and the host agree again");
}

#[test]
fn an_unchanged_manual_conflict_is_recorded_once() {
    let mut histories = Vec::new();
    let left = |s| record(s, ConflictResolution::LeftAlone, "3 vs 4");
    assert!(record_conflict(&mut histories, &object("g1"), left(1)));
    assert!(!record_conflict(&mut histories, &object("g1"), left(2)));
    assert!(!record_conflict(&mut histories, &object("g1"), left(3)));
    assert_eq!(histories[0].records.len(), 1);
    assert_eq!(histories[0].records[0].time, at(1));
    // New values in the same field are a new conflict.
    assert!(record_conflict(
        &mut histories,
        &object("g1"),
        record(4, ConflictResolution::LeftAlone, "5 vs 4")
    ));
    assert_eq!(histories[0].records.len(), 2);
}

#[test]
fn settled_conflicts_are_each_recorded() {
    let mut histories = Vec::new();
    let won = |s| record(s, ConflictResolution::TenantWon, "3 vs 4");
    assert!(record_conflict(&mut histories, &object("g1"), won(1)));
    assert!(record_conflict(&mut histories, &object("g1"), won(2)));
    assert_eq!(histories[0].records.len(), 2);
}

#[test]
fn resolved_ends_only_a_conflict_left_alone_and_takes_its_fields() {
    let mut histories = Vec::new();
    let resolved = |s| ConflictRecord {
        fields: Vec::new(),
        ..record(s, ConflictResolution::Resolved, "agree again")
    };
    assert!(!record_conflict(&mut histories, &object("g1"), resolved(1)));
    assert!(histories.is_empty(), "a clean object got a history");
    record_conflict(
        &mut histories,
        &object("g1"),
        record(2, ConflictResolution::LeftAlone, "3 vs 4"),
    );
    assert!(record_conflict(&mut histories, &object("g1"), resolved(3)));
    assert!(
        !record_conflict(&mut histories, &object("g1"), resolved(4)),
        "resolved twice"
    );
    let records = &histories[0].records;
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].resolution, ConflictResolution::Resolved);
    assert_eq!(records[1].fields, ["/spec/size"]);
}

#[test]
fn each_object_keeps_its_latest_records_newest_last() {
    let mut histories = Vec::new();
    for s in 0..(MAX_CONFLICT_RECORDS as i64 + 5) {
        record_conflict(
            &mut histories,
            &object("g1"),
            record(s, ConflictResolution::HostWon, "x"),
        );
    }
    let records = &histories[0].records;
    assert_eq!(records.len(), MAX_CONFLICT_RECORDS);
    assert_eq!(records[0].time, at(5));
    assert_eq!(
        records.last().unwrap().time,
        at(MAX_CONFLICT_RECORDS as i64 + 4)
    );
}

#[test]
fn the_object_least_recently_in_conflict_is_evicted_first() {
    let mut histories = Vec::new();
    let won = |s| record(s, ConflictResolution::TenantWon, "x");
    for i in 0..MAX_CONFLICTED_OBJECTS {
        record_conflict(&mut histories, &object(&format!("g{i}")), won(i as i64));
    }
    // g0 conflicts again: g1 is now the least recent.
    record_conflict(&mut histories, &object("g0"), won(1000));
    record_conflict(&mut histories, &object("new"), won(1001));
    assert_eq!(histories.len(), MAX_CONFLICTED_OBJECTS);
    let names: Vec<&str> = histories.iter().map(|h| h.tenant.name.as_str()).collect();
    assert!(!names.contains(&"g1"), "g1 was kept");
    assert!(names.contains(&"g0") && names.contains(&"new"));
    assert_eq!(names.last(), Some(&"new"));
    assert_eq!(
        history_of(&histories, "Gadget", "g0-x-default-x-dev")
            .unwrap()
            .records
            .len(),
        2
    );
    assert!(history_of(&histories, "Widget", "g0-x-default-x-dev").is_none());
}

#[test]
fn a_long_detail_is_cut() {
    let mut histories = Vec::new();
    let long = "v".repeat(MAX_DETAIL_CHARS * 2);
    record_conflict(
        &mut histories,
        &object("g1"),
        record(1, ConflictResolution::LeftAlone, &long),
    );
    assert_eq!(
        histories[0].records[0].detail.chars().count(),
        MAX_DETAIL_CHARS
    );
    // The cut repeat is still recognised as the same conflict.
    assert!(!record_conflict(
        &mut histories,
        &object("g1"),
        record(2, ConflictResolution::LeftAlone, &long)
    ));
}

fn resolution() -> impl proptest::strategy::Strategy<Value = ConflictResolution> {
    use proptest::prelude::*;
    prop_oneof![
        Just(ConflictResolution::LeftAlone),
        Just(ConflictResolution::TenantWon),
        Just(ConflictResolution::HostWon),
        Just(ConflictResolution::Resolved),
    ]
}

proptest::proptest! {
    /// Whatever the engine reports, in whatever order: the caps hold, each object
    /// has one history, records stay in time order, a Resolved record only ends a
    /// conflict left alone, and no conflict left alone is repeated unchanged.
    #[test]
    fn histories_keep_their_shape(
        events in proptest::collection::vec((0..120usize, resolution(), 0..3u8), 0..400)
    ) {
        let mut histories = Vec::new();
        for (second, (object_index, resolution, detail)) in events.into_iter().enumerate() {
            record_conflict(
                &mut histories,
                &object(&format!("g{object_index}")),
                record(second as i64, resolution, &format!("values {detail}")),
            );
        }
        proptest::prop_assert!(histories.len() <= MAX_CONFLICTED_OBJECTS);
        let mut names: Vec<&str> = histories.iter().map(|h| h.host.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        proptest::prop_assert_eq!(names.len(), histories.len());
        for history in &histories {
            let records = &history.records;
            proptest::prop_assert!(!records.is_empty() && records.len() <= MAX_CONFLICT_RECORDS);
            for pair in records.windows(2) {
                proptest::prop_assert!(pair[0].time.0 < pair[1].time.0);
                if pair[1].resolution == ConflictResolution::Resolved {
                    proptest::prop_assert_eq!(pair[0].resolution, ConflictResolution::LeftAlone);
                }
                if pair[0].resolution == ConflictResolution::LeftAlone
                    && pair[1].resolution == ConflictResolution::LeftAlone
                {
                    proptest::prop_assert_ne!(&pair[0].detail, &pair[1].detail);
                }
            }
        }
        // Objects are ordered by their latest record.
        for pair in histories.windows(2) {
            let last = |h: &ConflictHistory| h.records.last().map(|r| r.time.0);
            proptest::prop_assert!(last(&pair[0]) < last(&pair[1]));
        }
    }
}
