//! Frames converted between the three spellings.

use super::super::wire::{
    canonical, dialect_of, from_canonical, part_from_v10, part_to_v10, short_state, state_from_v10,
    state_to_v10, Dialect,
};
use super::*;

#[test]
fn frames_survive_a_trip_through_v10_form() {
    for (body, dialect) in [
        (captures::V03_STREAM, Dialect::Kinded),
        (captures::V03_CANCELED_STREAM, Dialect::Kinded),
        (captures::V10_STREAM, Dialect::Proto),
        (captures::REST10_STREAM, Dialect::Proto),
        (captures::REST03_STREAM, Dialect::Proto03),
    ] {
        for frame in stream_results(body) {
            let canon = canonical(&frame).expect("a known frame");
            assert_eq!(from_canonical(&canon, dialect), frame);
            // Where the spelling is ambiguous (a v0.3 HTTP+JSON `working` update is
            // also valid v1.0), both spellings are the same bytes.
            assert_eq!(from_canonical(&canon, dialect_of(&frame)), frame);
        }
        let first = &stream_results(body)[0];
        assert_eq!(dialect_of(first), dialect, "{first}");
    }
}

#[test]
fn v03_and_v10_frames_convert_into_each_other() {
    let v03 = stream_results(captures::V03_STREAM);
    let v10: Vec<Value> = v03
        .iter()
        .map(|f| from_canonical(&canonical(f).unwrap(), Dialect::Proto))
        .collect();
    assert_eq!(v10[0]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    assert_eq!(v10[0]["task"]["history"][0]["role"], "ROLE_USER");
    assert_eq!(
        v10[0]["task"]["history"][0]["parts"],
        json!([{ "text": "My project is named zebra42." }])
    );
    assert_eq!(
        v10[2]["artifactUpdate"]["artifact"]["parts"],
        json!([{ "text": "You " }])
    );
    assert_eq!(
        v10[9]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert!(v10[9]["statusUpdate"].get("final").is_none());
    // And back: the SDK's v0.3 frames again.
    for (orig, converted) in v03.iter().zip(&v10) {
        assert_eq!(
            &from_canonical(&canonical(converted).unwrap(), Dialect::Kinded),
            orig
        );
    }
    let file = json!({ "url": "https://x/a", "filename": "a", "mediaType": "text/plain" });
    assert_eq!(
        part_from_v10(&file, Dialect::Kinded),
        json!({ "kind": "file", "file": { "uri": "https://x/a", "name": "a", "mimeType": "text/plain" } })
    );
    assert_eq!(
        part_from_v10(&file, Dialect::Proto03),
        json!({ "file": { "fileWithUri": "https://x/a", "name": "a", "mimeType": "text/plain" } })
    );
    assert_eq!(part_to_v10(&part_from_v10(&file, Dialect::Kinded)), file);
    assert_eq!(part_to_v10(&part_from_v10(&file, Dialect::Proto03)), file);
    assert_eq!(short_state("TASK_STATE_CANCELLED"), "canceled");
    assert_eq!(state_to_v10("input-required"), "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(
        state_from_v10("TASK_STATE_CANCELED", Dialect::Proto03),
        "TASK_STATE_CANCELLED"
    );
}
