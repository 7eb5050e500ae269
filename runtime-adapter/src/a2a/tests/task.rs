//! Folding frames into the task, and the answer's text.

use super::super::task::{answer_text, artifacts_text, Fold};
use super::*;

#[test]
fn folding_applies_appends_replacements_and_messages() {
    let mut fold = Fold::default();
    let update = |append: bool, id: &str, text: &str| {
        json!({ "artifactUpdate": { "taskId": "t", "contextId": "c", "append": append,
            "artifact": { "artifactId": id, "parts": [{ "text": text }] } } })
    };
    fold.apply(&update(false, "a", "1"));
    fold.apply(&update(true, "a", "2"));
    fold.apply(&update(false, "b", "x"));
    fold.apply(&update(false, "b", "y"));
    fold.apply(&json!({ "message": { "taskId": "t", "role": "ROLE_AGENT", "parts": [{ "text": "thinking" }] } }));
    fold.apply(&json!({ "statusUpdate": { "taskId": "other", "status": { "state": "TASK_STATE_FAILED" } } }));
    let task = fold.task.unwrap();
    assert_eq!(task["id"], "t");
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    assert_eq!(artifacts_text(&task), "12\ny");
    assert_eq!(task["history"][0]["parts"][0]["text"], "thinking");
    assert_eq!(answer_text(&task), "12\ny");
}

#[test]
fn the_answer_text_does_not_repeat_the_status_message() {
    let task = |artifacts: Value, status: &str| {
        json!({ "artifacts": artifacts,
                "status": { "state": "TASK_STATE_COMPLETED", "message": { "role": "ROLE_AGENT", "parts": [{ "text": status }] } } })
    };
    let answer =
        json!([{ "artifactId": "a", "parts": [{ "text": "You " }, { "text": "said: hi" }] }]);
    assert_eq!(
        answer_text(&task(answer.clone(), "You said: hi")),
        "You said: hi"
    );
    assert_eq!(answer_text(&task(answer, "Done.")), "You said: hi\n\nDone.");
    assert_eq!(answer_text(&task(json!([]), "Which city?")), "Which city?");
}
